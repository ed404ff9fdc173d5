/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Explicit little-endian integers, for every byte format the library
 * writes or reads (the blob, the peer-fd handle, the socket route's
 * messages): one byte order whatever the host's.
 */
#ifndef MOONCAKE_SEGMENT_LITTLE_ENDIAN_H
#define MOONCAKE_SEGMENT_LITTLE_ENDIAN_H

#include <stdint.h>

static inline void mc_put_le(uint8_t *p, uint64_t value, unsigned int bytes)
{
	for (unsigned int i = 0; i < bytes; i++)
		p[i] = (uint8_t)(value >> (8 * i));
}

static inline uint64_t mc_get_le(const uint8_t *p, unsigned int bytes)
{
	uint64_t value = 0;

	for (unsigned int i = bytes; i > 0; i--)
		value = (value << 8) | p[i - 1];
	return value;
}

static inline void mc_put_le16(uint8_t *p, uint16_t value)
{
	mc_put_le(p, value, 2);
}

static inline void mc_put_le32(uint8_t *p, uint32_t value)
{
	mc_put_le(p, value, 4);
}

static inline void mc_put_le64(uint8_t *p, uint64_t value)
{
	mc_put_le(p, value, 8);
}

static inline uint16_t mc_get_le16(const uint8_t *p)
{
	return (uint16_t)mc_get_le(p, 2);
}

static inline uint32_t mc_get_le32(const uint8_t *p)
{
	return (uint32_t)mc_get_le(p, 4);
}

static inline uint64_t mc_get_le64(const uint8_t *p)
{
	return mc_get_le(p, 8);
}

#endif
