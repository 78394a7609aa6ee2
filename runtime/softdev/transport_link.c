//go:build linux && cgo

/*
 * softdev links: how the RC transport's packets reach the device at the
 * other end of a path, and nothing else. transport_rc.c sends with sd_link_send and
 * takes what arrives in sd_rc_rx; it asks sd_link_busy before it starts
 * more. Two kinds:
 *
 *  - the device itself (port->loop): packets wait in a queue that the
 *    engine empties after every step (sd_loop_drain), payloads by
 *    reference, so a transfer between two QPs of one device completes in
 *    the step that started it and nothing is ever lost;
 *  - a peer device on the wire (transport_wire.c): frames on a TCP connection.
 */
#include <stdlib.h>
#include <string.h>
#include "transport.h"

static int loop_push(struct sd_port *port, const struct sd_pkt *p)
{
	if (port->loopq_len == port->loopq_cap) {
		uint32_t cap = port->loopq_cap ? 2 * port->loopq_cap : 64;
		struct sd_pkt *n = malloc((size_t)cap * sizeof *n);
		if (n == NULL) {
			port->loop.dropped++; /* out of memory: the packet is lost, and its WQE will fail */
			return -1;
		}
		for (uint32_t i = 0; i < port->loopq_len; i++)
			n[i] = port->loopq[(port->loopq_head + i) % port->loopq_cap];
		free(port->loopq);
		port->loopq = n;
		port->loopq_cap = cap;
		port->loopq_head = 0;
	}
	struct sd_pkt *slot = &port->loopq[(port->loopq_head + port->loopq_len) % port->loopq_cap];
	*slot = *p;
	if (p->data == p->small)
		slot->data = slot->small; /* carried by value: point at the copy */
	port->loopq_len++;
	return 0;
}

int sd_link_send(struct sd_port *port, struct sd_link *l, const struct sd_pkt *p)
{
	if (l->kind == SD_LINK_LOOP)
		return loop_push(port, p);
	return sd_wire_send(port, l, p);
}

int sd_link_busy(struct sd_port *port, struct sd_link *l)
{
	return l->kind == SD_LINK_WIRE && sd_wire_busy(port, l);
}

/* Delivers every packet queued on the loopback link, those their
 * delivery queues included; then whatever the step's sender sent that
 * got no answer never will (transport_rc.c fails it at once). */
void sd_loop_drain(struct sd_port *port)
{
	while (port->loopq_len > 0) {
		struct sd_pkt p = port->loopq[port->loopq_head];
		if (p.data == port->loopq[port->loopq_head].small)
			p.data = p.small;
		port->loopq_head = (port->loopq_head + 1) % port->loopq_cap;
		port->loopq_len--;
		sd_rc_rx(port, &port->loop, &p);
	}
	if (port->loop_sender != NULL) {
		struct sd_qp *q = port->loop_sender;
		port->loop_sender = NULL;
		sd_rc_unanswered(port, q);
	}
}

/* The link to gid: the device itself, or the wire link to that device
 * (one per peer, shared by the paths to it). NULL when out of memory. */
struct sd_link *sd_link_get(struct sd_port *port, const uint8_t gid[16])
{
	if (memcmp(gid, port->gid, 16) == 0) {
		port->loop.refs++;
		return &port->loop;
	}
	for (struct sd_link *l = port->links; l != NULL; l = l->next) {
		if (memcmp(l->gid, gid, 16) == 0) {
			l->refs++;
			return l;
		}
	}
	struct sd_link *l = calloc(1, sizeof *l);
	if (l == NULL)
		return NULL;
	l->kind = SD_LINK_WIRE;
	memcpy(l->gid, gid, 16);
	l->refs = 1;
	l->next = port->links;
	port->links = l;
	return l;
}

/* A path lets go of its link; a wire link nobody uses closes. */
void sd_link_put(struct sd_port *port, struct sd_link *l)
{
	if (l == NULL || --l->refs > 0 || l->kind != SD_LINK_WIRE)
		return;
	for (struct sd_link **pp = &port->links; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	sd_wire_close_link(port, l);
	free(l);
}

/* The device closes (its wire closed, sd_net_close): the wire links its
 * paths still held and the loopback queue are freed. */
void sd_link_free_all(struct sd_port *port)
{
	while (port->links != NULL) {
		struct sd_link *l = port->links;
		port->links = l->next;
		free(l);
	}
	free(port->loopq);
	port->loopq = NULL;
}
