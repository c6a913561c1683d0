"""Discord-only helpers shared by the cogs: the answer policy, message splitting, voices
(webhooks), the per-channel rate limit and the buttons."""
