/*
 * softdev: the exported verbs of libibverbs for this device's objects
 * (front_go.c), and what the Go side needs of them (libverbs.go).
 */
#ifndef SOFTDEV_FRONT_GO_H
#define SOFTDEV_FRONT_GO_H

#include <stdint.h>
#include <infiniband/verbs_exp.h>

/* One function registered with dynlib.Provide: the verb's name and ours. */
struct sdl_export {
	const char *name;
	void       *fn;
};

/* The functions, with the library and the ABI marker they stand in for. */
const struct sdl_export *sdl_exports(const char **lib, const char **marker, int *n);

/* Open devices: registered by Open (handle: the Go *Device), forgotten by
 * Close, which waits there for the calls in flight. */
int sdl_register(struct ibv_context *ctx, uintptr_t handle);
void sdl_forget(struct ibv_context *ctx);

/* ibv_ack_async_event for Device.AckAsyncEvent: 0 or EINVAL. */
int sdl_ack(struct ibv_context *ctx, struct ibv_async_event *ev);

/* Calls in flight on ctx's device, -1 if it is not open (tests). */
int sdl_users(struct ibv_context *ctx);

#endif /* SOFTDEV_FRONT_GO_H */
