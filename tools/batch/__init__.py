"""`tsvk batch`: score a folder or a table of photos offline with the archive's own serving code, resumably."""
