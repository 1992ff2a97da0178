/*
 * tok_bytes.c: GPT-2's byte <-> unicode table (byte-level BPE vocabularies
 * spell every byte as a printable code point) and writing a code point as
 * UTF-8.
 */
#include "tok_internal.h"

/*
 * Printable bytes (33..126, 161..172, 174..255) stand for themselves; the
 * other 68 bytes, in increasing order, become U+0100, U+0101, ...
 */
uint32_t
tok_byte_to_cp(uint8_t b)
{
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
		return b;
	if (b <= 32)
		return 256u + b;
	if (b <= 160)
		return 256u + 33 + (b - 127u);
	return 256u + 67;	/* 173 */
}

int
tok_cp_to_byte(uint32_t cp)
{
	if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
		return (int)cp;
	if (cp < 256 || cp > 256 + 67)
		return -1;
	cp -= 256;
	if (cp < 33)
		return (int)cp;
	if (cp < 67)
		return (int)(127 + cp - 33);
	return 173;
}

size_t
tok_put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xC0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xE0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}
