"""Model files shipped with tsvk, for `--model-file`: each one plain torch, so an archive of it runs on a stock worker."""
