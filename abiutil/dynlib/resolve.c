//go:build cgo

/*
 * The registry of provided functions and the resolver shared by Lib.Lookup,
 * the generated weak stubs and providers' forwarders (see dynlib.h).
 */
#define _GNU_SOURCE
#define VERBSEXP_DYNLIB_SELF
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "dynlib.h"

/* One (library, ABI, symbol): registered with a function, or only looked
 * up (fn NULL), which closes it to registration. Lookups are rare (once
 * per symbol and caller), so a list will do. */
struct entry {
	char         *lib, *marker, *name;
	void         *fn;
	struct entry *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct entry   *entries;

static const char *or_empty(const char *s) { return s ? s : ""; }

static struct entry *find(const char *lib, const char *marker, const char *name)
{
	for (struct entry *e = entries; e != NULL; e = e->next)
		if (!strcmp(e->lib, lib) && !strcmp(e->marker, or_empty(marker)) && !strcmp(e->name, name))
			return e;
	return NULL;
}

static struct entry *add(const char *lib, const char *marker, const char *name, void *fn)
{
	struct entry *e = calloc(1, sizeof *e);
	if (e == NULL)
		return NULL;
	e->lib = strdup(lib);
	e->marker = strdup(or_empty(marker));
	e->name = strdup(name);
	if (e->lib == NULL || e->marker == NULL || e->name == NULL) {
		free(e->lib);
		free(e->marker);
		free(e->name);
		free(e);
		return NULL;
	}
	e->fn = fn;
	e->next = entries;
	entries = e;
	return e;
}

int verbsexp_dynlib_provide(const char *lib, const char *marker, const char *name, void *fn)
{
	if (lib == NULL || name == NULL || fn == NULL)
		return EINVAL;
	pthread_mutex_lock(&mu);
	struct entry *e = find(lib, marker, name);
	int err = 0;
	if (e != NULL)
		err = e->fn != NULL ? EEXIST : EBUSY;
	else if (add(lib, marker, name, fn) == NULL)
		err = ENOMEM;
	pthread_mutex_unlock(&mu);
	return err;
}

void *verbsexp_dynlib_provided(const char *const *names, const char *marker, const char *name)
{
	void *fn = NULL;
	pthread_mutex_lock(&mu);
	for (const char *const *n = names; fn == NULL && *n != NULL; n++) {
		struct entry *e = find(*n, marker, name);
		if (e != NULL)
			fn = e->fn;
	}
	if (fn == NULL)
		for (const char *const *n = names; *n != NULL; n++)
			if (find(*n, marker, name) == NULL)
				add(*n, marker, name, NULL); /* out of memory: only the EBUSY check is lost */
	pthread_mutex_unlock(&mu);
	return fn;
}

void *verbsexp_dynlib_real(const char *const *names, const char *marker, const char *name)
{
	void *h = NULL;
	for (const char *const *n = names; h == NULL && *n != NULL; n++)
		h = dlopen(*n, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL)
		return NULL;
	if (marker != NULL && *marker != '\0' && dlsym(h, marker) == NULL)
		return NULL; /* another ABI: calling into it would corrupt memory */
	return dlsym(h, name);
}

void *verbsexp_dynlib_resolve(const char *const *names, const char *marker, const char *name)
{
	void *fn = verbsexp_dynlib_provided(names, marker, name);
	return fn != NULL ? fn : verbsexp_dynlib_real(names, marker, name);
}

int verbsexp_dynlib_count_provided(void)
{
	int n = 0;
	pthread_mutex_lock(&mu);
	for (struct entry *e = entries; e != NULL; e = e->next)
		if (e->fn != NULL)
			n++;
	pthread_mutex_unlock(&mu);
	return n;
}
