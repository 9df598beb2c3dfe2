-- Macros the models share: one definition of each predicate and constant.

-- The report window a time falls in (variable window_s seconds, aligned on the epoch).
CREATE OR REPLACE MACRO window_of(ts) AS
    CAST(floor(epoch_ns(ts) / (getvariable('window_s') * 1e9)) AS BIGINT);
