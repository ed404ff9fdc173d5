/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench --background's curves: the readiness front of a background create,
 * sampled about every millisecond (bench-methods.c), kept as points and
 * written as CSV (t_ms,bytes: one file per size and thread count) and as one
 * SVG plot per size, written by hand (no dependency): each thread count's
 * front over time, and a dashed line where the blocking commit of the same
 * size and threads returned.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "cli.h"

bool front_curve_add(struct front_curve *c, double t_ms, uint64_t bytes)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 1024;
		double *t = realloc(c->t_ms, cap * sizeof(*t));
		uint64_t *b;

		if (!t)
			return false;
		c->t_ms = t;
		b = realloc(c->bytes, cap * sizeof(*b));
		if (!b)
			return false;
		c->bytes = b;
		c->cap = cap;
	}
	c->t_ms[c->n] = t_ms;
	c->bytes[c->n] = bytes;
	c->n++;
	return true;
}

void front_curve_free(struct front_curve *c)
{
	free(c->t_ms);
	free(c->bytes);
	memset(c, 0, sizeof(*c));
}

bool front_curve_write_csv(const struct front_curve *c, const char *path)
{
	FILE *f = fopen(path, "w");
	bool ok;

	if (!f)
		return false;
	fputs("t_ms,bytes\n", f);
	for (size_t i = 0; i < c->n; i++)
		fprintf(f, "%.3f,%llu\n", c->t_ms[i], (unsigned long long)c->bytes[i]);
	ok = fflush(f) == 0 && !ferror(f);
	return fclose(f) == 0 && ok;
}

/* The plot's frame: pixels of the plotting area inside the picture. */
#define SVG_W	  800
#define SVG_H	  480
#define SVG_LEFT  80
#define SVG_RIGHT 30
#define SVG_TOP	  50
#define SVG_BOT	  60
#define SVG_TICKS 5
/* At most this many points per curve in the picture (the CSV has them all). */
#define SVG_POINTS 2000

static const char *const colours[2] = { "#d95f02", "#1b9e77" };

static double x_of(double t_ms, double t_max)
{
	return SVG_LEFT + t_ms / t_max * (SVG_W - SVG_LEFT - SVG_RIGHT);
}

static double y_of(double bytes, double b_max)
{
	return SVG_H - SVG_BOT - bytes / b_max * (SVG_H - SVG_TOP - SVG_BOT);
}

static void svg_axes(FILE *f, double t_max, double b_max)
{
	fprintf(f,
		"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n"
		"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n",
		SVG_LEFT, SVG_H - SVG_BOT, SVG_W - SVG_RIGHT, SVG_H - SVG_BOT, SVG_LEFT, SVG_TOP, SVG_LEFT,
		SVG_H - SVG_BOT);
	for (int i = 0; i <= SVG_TICKS; i++) {
		double t = t_max * i / SVG_TICKS, b = b_max * i / SVG_TICKS;

		fprintf(f,
			"<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ccc\"/>"
			"<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n",
			x_of(t, t_max), SVG_TOP, x_of(t, t_max), SVG_H - SVG_BOT, x_of(t, t_max),
			SVG_H - SVG_BOT + 18, t);
		fprintf(f,
			"<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ccc\"/>"
			"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n",
			SVG_LEFT, y_of(b, b_max), SVG_W - SVG_RIGHT, y_of(b, b_max), SVG_LEFT - 6,
			y_of(b, b_max) + 4, b / (double)(UINT64_C(1) << 30));
	}
	fprintf(f,
		"<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">ms since create() was called</text>\n"
		"<text x=\"20\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 20 %d)\">ready GiB</text>\n",
		(SVG_LEFT + SVG_W - SVG_RIGHT) / 2, SVG_H - 20, (SVG_TOP + SVG_H - SVG_BOT) / 2,
		(SVG_TOP + SVG_H - SVG_BOT) / 2);
}

static void svg_curve(FILE *f, const struct background_report *b, int k, double blocking_s, double t_max,
		      double b_max)
{
	const struct front_curve *c = &b->curve;
	size_t step = c->n > SVG_POINTS ? (c->n + SVG_POINTS - 1) / SVG_POINTS : 1;
	int legend_y = SVG_TOP + 20 + 36 * k;

	fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colours[k]);
	for (size_t i = 0; i < c->n; i += step)
		fprintf(f, "%.1f,%.1f ", x_of(c->t_ms[i], t_max), y_of((double)c->bytes[i], b_max));
	if (c->n && (c->n - 1) % step)
		fprintf(f, "%.1f,%.1f", x_of(c->t_ms[c->n - 1], t_max),
			y_of((double)c->bytes[c->n - 1], b_max));
	fputs("\"/>\n", f);
	fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"%s\">background, %u thread%s: ready in %.3f s</text>\n",
		SVG_LEFT + 14, legend_y, colours[k], b->threads, b->threads == 1 ? "" : "s", b->ready_s);
	if (blocking_s > 0)
		fprintf(f,
			"<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-dasharray=\"6,4\"/>\n"
			"<text x=\"%d\" y=\"%d\" fill=\"%s\">blocking create, %u thread%s: %.3f s (dashed)</text>\n",
			x_of(blocking_s * 1e3, t_max), SVG_TOP, x_of(blocking_s * 1e3, t_max),
			SVG_H - SVG_BOT, colours[k], SVG_LEFT + 14, legend_y + 16, colours[k], b->threads,
			b->threads == 1 ? "" : "s", blocking_s);
}

bool front_curve_write_svg(const struct size_report *r, const double *blocking_s, const char *path)
{
	double t_max = 1, b_max = (double)r->size;
	char a[32];
	FILE *f;
	bool ok;

	for (int k = 0; k < 2; k++) {
		const struct front_curve *c = &r->background[k].curve;

		if (!r->background[k].threads)
			continue;
		if (c->n && c->t_ms[c->n - 1] > t_max)
			t_max = c->t_ms[c->n - 1];
		if (blocking_s[k] * 1e3 > t_max)
			t_max = blocking_s[k] * 1e3;
		if (c->n && (double)c->bytes[c->n - 1] > b_max)
			b_max = (double)c->bytes[c->n - 1];
	}
	t_max *= 1.05;
	f = fopen(path, "w");
	if (!f)
		return false;
	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
		"font-family=\"sans-serif\" font-size=\"12\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		"<text x=\"%d\" y=\"28\" font-size=\"16\">%s bench: the readiness front of a %s "
		"background create</text>\n",
		SVG_W, SVG_H, SVG_W, SVG_H, SVG_LEFT, PROGRAM, format_size(r->size, a, sizeof(a)));
	svg_axes(f, t_max, b_max);
	for (int k = 0; k < 2; k++)
		if (r->background[k].threads)
			svg_curve(f, &r->background[k], k, blocking_s[k], t_max, b_max);
	fputs("</svg>\n", f);
	ok = fflush(f) == 0 && !ferror(f);
	return fclose(f) == 0 && ok;
}

/* "1G", "256M" or the bytes: the size as a file name's part. */
static void size_token(uint64_t size, char *buf, size_t len)
{
	if (size % (UINT64_C(1) << 30) == 0)
		snprintf(buf, len, "%lluG", (unsigned long long)(size >> 30));
	else if (size % (UINT64_C(1) << 20) == 0)
		snprintf(buf, len, "%lluM", (unsigned long long)(size >> 20));
	else
		snprintf(buf, len, "%llu", (unsigned long long)size);
}

static int cannot_write(const char *path)
{
	fprintf(stderr, "%s bench: cannot write %s: %s\n", PROGRAM, path, strerror(errno ? errno : EIO));
	return 1;
}

int bench_write_curves(const char *dir, struct size_report *r, const double *blocking_s)
{
	char size[32];
	bool any = false;

	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "%s bench: cannot create --out %s: %s\n", PROGRAM, dir, strerror(errno));
		return 1;
	}
	size_token(r->size, size, sizeof(size));
	for (int k = 0; k < 2; k++) {
		struct background_report *b = &r->background[k];

		if (!b->threads || !b->curve.n)
			continue;
		any = true;
		snprintf(b->csv, sizeof(b->csv), "%s/front-%s-%ut.csv", dir, size, b->threads);
		errno = 0;
		if (!front_curve_write_csv(&b->curve, b->csv))
			return cannot_write(b->csv);
	}
	if (!any)
		return 0;
	for (int k = 0; k < 2; k++)
		if (r->background[k].threads && r->background[k].curve.n)
			snprintf(r->background[k].svg, sizeof(r->background[k].svg), "%s/front-%s.svg", dir,
				 size);
	errno = 0;
	for (int k = 0; k < 2; k++)
		if (r->background[k].svg[0])
			return front_curve_write_svg(r, blocking_s, r->background[k].svg)
				       ? 0
				       : cannot_write(r->background[k].svg);
	return 0;
}
