-- Reserved for the burst branch's migration (issue 22 items 4, 12): this placeholder is replaced by it
-- at merge, so that 0009 applies on this branch alone.
SELECT 1;
