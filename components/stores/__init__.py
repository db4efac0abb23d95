"""The stores both pipelines read and write: the Milvus store value and its collection, the two vector-search paths, the L0 index."""
