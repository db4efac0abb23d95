"""The stores both pipelines read and write: the Milvus collection, the two vector-search paths, the L0 index."""
