-- Which instance runs the background analytics projector: a lease renewed every tick and taken
-- over by another instance once it has expired (its holder died or lost the database). Plain rows
-- and single statements, no session-level lock, so it also works behind a transaction pooler.
CREATE TABLE projector_leases
(
    projector  text   NOT NULL PRIMARY KEY,
    holder     text   NOT NULL,
    expires_ms bigint NOT NULL
);
