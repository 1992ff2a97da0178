/*
 * cpu_backend.c: the CPU backend's vtable, gathering the entries of cpu.c
 * (context, forward), cpu_kv.c (caches) and cpu_multi.c (several
 * sequences in one pass). It sits above those files so that cpu_multi.c
 * can use cpu.c's layers without cpu.c naming it back.
 */
#include "backend.h"
#include "cpu_int.h"

const struct kvc_backend_i kvc_backend_cpu = {
	.name = "cpu",
	.init = cpu_init,
	.free = cpu_free,
	.kv_create = cpu_kv_create,
	.kv_destroy = cpu_kv_destroy,
	.kv_bytes = cpu_kv_bytes,
	.forward = cpu_forward,
	.kv_read = cpu_kv_read,
	.kv_write = cpu_kv_write,
	.kv_shift = cpu_kv_shift,
	.describe = cpu_describe,
	.kv_lowest = cpu_kv_lowest,
	.forward_multi = cpu_forward_multi,
	.prefill_multi = cpu_prefill_multi,
};
