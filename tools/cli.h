/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the mooncake-segment subcommands. */
#ifndef MOONCAKE_SEGMENT_CLI_H
#define MOONCAKE_SEGMENT_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What the library knows that the tool reports too (not for applications). */
#include "private.h"

int cmd_demo(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_keep(int argc, char **argv);

/* "256M", "1G", "4GiB", "1048576" -> bytes; false on junk or overflow. */
bool parse_size(const char *text, uint64_t *bytes);
/* A decimal in [min, max]; false otherwise. */
bool parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *value);
/* "256.0 MiB" into @buf. */
const char *format_size(uint64_t bytes, char *buf, size_t size);

/* Write @s as a JSON string literal (with quotes). */
/* @text between double quotes, with backslash, double quote and newline
 * escaped (and, for @json, every other control character), each byte that
 * is not part of well-formed UTF-8 written as U+FFFD: a label cut in the
 * middle of a character, or a hostile process's name, cannot make the
 * JSON or the Prometheus text invalid. */
void write_quoted_utf8(FILE *out, const char *text, bool json);
void json_string(FILE *out, const char *s);
/* @text for a terminal: every control character and byte that is not UTF-8
 * written as \xNN, so that a label or a command name cannot move the
 * cursor, clear the screen or draw fake rows.  Returns @buf. */
const char *printable(const char *text, char *buf, size_t size);
/* Flush @out and check it: 0, or 1 after naming @what and the error on
 * stderr (a full disk, a closed pipe). */
int finish_output(FILE *out, const char *what);

/* The program's diagnostic prefix. */
#define PROGRAM "mooncake-segment"

#endif
