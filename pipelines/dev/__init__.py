"""Developer tools: a local Milvus server for tests and trials (`knowledge dev milvus-server`)."""
