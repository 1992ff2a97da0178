/*
 * checksum.c: XXH64 (seed 0), written from the published algorithm
 * description. Chosen over FNV-1a because it hashes 32 bytes per step:
 * verifying gigabytes of snapshot on resume must not cost seconds.
 */
#include "store.h"

#include <string.h>

static const uint64_t P1 = 0x9E3779B185EBCA87ULL;
static const uint64_t P2 = 0xC2B2AE3D27D4EB4FULL;
static const uint64_t P3 = 0x165667B19E3779F9ULL;
static const uint64_t P4 = 0x85EBCA77C2B2AE63ULL;
static const uint64_t P5 = 0x27D4EB2F165667C5ULL;

static uint64_t
rotl(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* Little-endian loads whatever the host order. */
static uint64_t
le64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

static uint32_t
le32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap32(v);
#endif
	return v;
}

static uint64_t
round64(uint64_t acc, uint64_t in)
{
	acc += in * P2;
	acc = rotl(acc, 31);
	return acc * P1;
}

static uint64_t
merge64(uint64_t h, uint64_t v)
{
	h ^= round64(0, v);
	return h * P1 + P4;
}

uint64_t
sess_checksum(const void *data, size_t n)
{
	const unsigned char *p = data, *end = p + n;
	uint64_t h;

	if (n >= 32) {
		uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0 - P1;

		/* Four independent lanes keep the multipliers busy. */
		while (end - p >= 32) {
			v1 = round64(v1, le64(p));
			v2 = round64(v2, le64(p + 8));
			v3 = round64(v3, le64(p + 16));
			v4 = round64(v4, le64(p + 24));
			p += 32;
		}
		h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
		h = merge64(h, v1);
		h = merge64(h, v2);
		h = merge64(h, v3);
		h = merge64(h, v4);
	} else {
		h = P5;
	}
	h += (uint64_t)n;
	while (end - p >= 8) {
		h ^= round64(0, le64(p));
		h = rotl(h, 27) * P1 + P4;
		p += 8;
	}
	if (end - p >= 4) {
		h ^= (uint64_t)le32(p) * P1;
		h = rotl(h, 23) * P2 + P3;
		p += 4;
	}
	while (p < end) {
		h ^= (uint64_t)*p * P5;
		h = rotl(h, 11) * P1;
		p++;
	}
	/* Avalanche so every input bit reaches every output bit. */
	h ^= h >> 33;
	h *= P2;
	h ^= h >> 29;
	h *= P3;
	h ^= h >> 32;
	return h;
}
