/*
 * The C side of package dynlib, for the C code of other packages: the
 * weak stubs a generated package compiles (stubs_linux.c) and providers
 * that stand in for a library's functions (runtime/softdev).
 *
 * names is a NULL-terminated list of library names, tried in order with
 * dlopen; marker is the symbol every library of the ABI the caller was
 * built for exports (a Guard's Symbol), or NULL for no check. A library
 * found without it is refused: these functions return NULL, as for a
 * missing library or symbol.
 *
 * Outside dynlib the declarations are weak, because cgo links each
 * package's C on its own before the program is linked; in a program that
 * imports package dynlib they are always defined.
 */
#ifndef VERBSEXP_DYNLIB_H
#define VERBSEXP_DYNLIB_H

#ifdef VERBSEXP_DYNLIB_SELF
#define VERBSEXP_DYNLIB_API
#else
#define VERBSEXP_DYNLIB_API __attribute__((weak))
#endif

/* Registers fn as name in library lib for callers built for marker's ABI
 * (dynlib.Provide). 0, or EEXIST (already provided), EBUSY (already
 * looked up: too late), EINVAL, ENOMEM. */
VERBSEXP_DYNLIB_API int verbsexp_dynlib_provide(const char *lib, const char *marker,
                                                const char *name, void *fn);

/* The function registered as name in one of names for marker's ABI, or
 * NULL. Either way the lookup is recorded, so a later registration of it
 * fails with EBUSY. */
VERBSEXP_DYNLIB_API void *verbsexp_dynlib_provided(const char *const *names, const char *marker,
                                                   const char *name);

/* name from the library itself, never a registered function: what a
 * provider forwards to for objects that are not its own. */
VERBSEXP_DYNLIB_API void *verbsexp_dynlib_real(const char *const *names, const char *marker,
                                               const char *name);

/* verbsexp_dynlib_provided, else verbsexp_dynlib_real: what a generated
 * stub calls. */
VERBSEXP_DYNLIB_API void *verbsexp_dynlib_resolve(const char *const *names, const char *marker,
                                                  const char *name);

/* How many functions are registered (dynlib.ProvidedCount). */
VERBSEXP_DYNLIB_API int verbsexp_dynlib_count_provided(void);

#endif /* VERBSEXP_DYNLIB_H */
