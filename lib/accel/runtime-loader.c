/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading an accelerator runtime at run time: dlopen of its versioned SONAME
 * (or the file an environment variable names, for unusual layouts and the
 * tests' fakes) and resolution of its entry points into a runtime's table of
 * function pointers, so that the library links no accelerator library.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "accel.h"
#include "base/environment.h"

bool mc_runtime_resolve(void *lib, const char *what, const struct mc_runtime_symbol *symbols, size_t count,
			char *failure, size_t size)
{
	for (size_t i = 0; i < count; i++) {
		*symbols[i].slot = dlsym(lib, symbols[i].name);
		if (!*symbols[i].slot) {
			snprintf(failure, size, "the %s lacks %s", what, symbols[i].name);
			for (size_t j = 0; j <= i; j++)
				*symbols[j].slot = NULL;
			return false;
		}
	}
	return true;
}

void *mc_runtime_open(const char *env, const char *soname, const char *what,
		      const struct mc_runtime_symbol *symbols, size_t count, char *failure, size_t size)
{
	/* Never obeyed in a privileged program: a user's .so would run there (mc_env). */
	const char *path = mc_env(env);
	void *lib = dlopen(path ? path : soname, RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		snprintf(failure, size, "%s", dlerror());
		return NULL;
	}
	if (!mc_runtime_resolve(lib, what, symbols, count, failure, size)) {
		dlclose(lib);
		return NULL;
	}
	return lib;
}
