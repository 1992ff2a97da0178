/* gguf.c: being written */
