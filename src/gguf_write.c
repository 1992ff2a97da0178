/* gguf_write.c: being written */
