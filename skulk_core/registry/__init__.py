"""The signed model registry's pure part: the catalog target format, its checks, the
identity rules of the merged catalog, and building a signed TUF repository."""
