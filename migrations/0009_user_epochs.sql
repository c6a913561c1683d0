-- One row per person while a turn of theirs may be under way in some process: a random epoch,
-- drawn by their first turn, deleted by their erase in the erase's own transaction. A turn reads
-- it when it begins, and each of its write transactions checks, with this one indexed read, that
-- it is still the same: a turn that began before an erase, in any process sharing the database,
-- writes nothing about that person after it. The erase leaves no row naming them; their next
-- turn draws a new epoch and is stored as usual.
CREATE TABLE user_epochs (
    user_id  TEXT    PRIMARY KEY,
    epoch    INTEGER NOT NULL
);
