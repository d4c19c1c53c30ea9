-- The content hash of every curriculum pack version a server has loaded against this database
-- (docs/content.md): a published version is never changed in place, so start-up compares each
-- installed pack with the hash recorded here and refuses an edited one.
CREATE TABLE content_packs
(
    curriculum_id   text   NOT NULL,
    version         bigint NOT NULL,
    content_hash    text   NOT NULL,
    first_loaded_ms bigint NOT NULL,
    PRIMARY KEY (curriculum_id, version)
);
