"""What is read out of a person's memory for them or the owner: the export, the statistics of
/memory-stats, and the owner's page's report."""
