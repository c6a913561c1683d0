"""Écho: a Discord character bot with a long-term, explainable memory of each user."""
