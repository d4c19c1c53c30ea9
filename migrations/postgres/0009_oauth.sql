-- The built-in OAuth 2.1 authorization server: registered clients (RFC 7591), authorization
-- codes (single use, PKCE S256) and refresh tokens (rotated; a family is revoked when a used
-- one comes back). Codes and tokens are stored only as blake3 hashes.
CREATE TABLE oauth_clients
(
    client_id     text    NOT NULL PRIMARY KEY,
    client_name   text    NOT NULL,
    redirect_uris text    NOT NULL,
    created_ms    bigint NOT NULL
);

CREATE TABLE oauth_codes
(
    code_hash      text    NOT NULL PRIMARY KEY,
    client_id      text    NOT NULL REFERENCES oauth_clients (client_id),
    learner_id     text    NOT NULL REFERENCES learners (learner_id),
    redirect_uri   text    NOT NULL,
    code_challenge text    NOT NULL,
    scope          text    NOT NULL,
    resource       text    NOT NULL,
    expires_ms     bigint NOT NULL,
    used_ms        bigint
);

CREATE TABLE oauth_refresh_tokens
(
    token_hash text    NOT NULL PRIMARY KEY,
    family_id  text    NOT NULL,
    client_id  text    NOT NULL REFERENCES oauth_clients (client_id),
    learner_id text    NOT NULL REFERENCES learners (learner_id),
    scope      text    NOT NULL,
    resource   text    NOT NULL,
    expires_ms bigint NOT NULL,
    used_ms    bigint,
    revoked_ms bigint
);
CREATE INDEX oauth_refresh_tokens_family ON oauth_refresh_tokens (family_id);
