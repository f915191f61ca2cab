"""Build-time half of the toolkit (installed as `tsvk_tools`): compile, archive, configure, benchmark."""
