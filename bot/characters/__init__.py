"""Characters (one file or card each, a cast of several) and their lorebooks."""
