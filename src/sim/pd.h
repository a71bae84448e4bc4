/*
 * pd.h - the simulator's side of prefill/decode disaggregation (--role prefill|decode), in the
 * two protocols the proxy speaks (proxy/pd.h), kept simple but faithful to what each side
 * checks:
 *
 *   vllm    a prefill sim that gets kv_transfer_params with "do_remote_decode": true answers
 *           (after its prefill) with kv_transfer_params: do_remote_prefill true,
 *           remote_engine_id (its name), remote_block_ids, remote_host and remote_port (its
 *           own). The block ids stand for the KV blocks of the prompt: one per block_bytes of
 *           the prompt's JSON text (at least one, at most SIM_PD_IDS_MAX), each the first 31
 *           bits of HMAC-SHA256(--pd-secret, prompt text || block index), so a decode sim
 *           given the same secret knows they were issued for this prompt by a prefill sim.
 *   sglang  a prefill sim that gets bootstrap_room registers the room once its prefill is done
 *           (a ring of the last SIM_PD_ROOMS) and answers GET /bootstrap/ROOM with 200 for a
 *           registered room, 404 else; a decode sim that gets bootstrap_host, bootstrap_port and
 *           bootstrap_room asks that address until the room is registered (every 5 ms, one
 *           short blocking GET each, up to 10 s), then decodes.
 *
 * A decode sim refuses with 400 a request whose transfer params are invalid, or that has none
 * (unless --pd-allow-local: it then prefills in place, as a real engine would); a valid one
 * costs it --kv-pull-us-per-block per block in place of the prefill.
 */
#ifndef ACCELNET_SIM_PD_H
#define ACCELNET_SIM_PD_H

#include <stddef.h>
#include <stdint.h>

#define SIM_PD_IDS_MAX 64
#define SIM_PD_ROOMS 4096
#define SIM_PD_HOST 64

enum sim_role { SIM_ROLE_BOTH, SIM_ROLE_PREFILL, SIM_ROLE_DECODE };

/* What a request body carries of the two protocols. */
struct sim_pd_req {
	int remote_decode; /* vllm: kv_transfer_params.do_remote_decode is true */
	int has_ids;	   /* vllm: kv_transfer_params.remote_block_ids, a list ... */
	int ids_bad;	   /* ... of which some entry is no number (or too many) */
	unsigned nids;
	uint32_t ids[SIM_PD_IDS_MAX];
	int has_room; /* sglang: bootstrap_room, bootstrap_host and bootstrap_port */
	uint64_t room;
	char host[SIM_PD_HOST];
	unsigned port;
};

/* Read body[0..len) (well-formed JSON is assumed: the fields are found, not validated). */
void sim_pd_read(const char *body, size_t len, struct sim_pd_req *r);

/* The block ids a prefill sim issues for prompt[0..plen): their count (1..SIM_PD_IDS_MAX). */
unsigned sim_pd_ids(const char *secret, const char *prompt, size_t plen, unsigned block_bytes,
		    uint32_t *ids);

/* ,"kv_transfer_params":{...} of a prefill answer into out[0..cap); its length. */
size_t sim_pd_params(char *out, size_t cap, const char *engine, const char *host, unsigned port,
		     const uint32_t *ids, unsigned n);

/* The rooms a prefill sim has bootstrapped. */
struct sim_pd_rooms {
	uint64_t room[SIM_PD_ROOMS];
	unsigned next, n;
};
void sim_pd_room_add(struct sim_pd_rooms *r, uint64_t room);
int sim_pd_room_has(const struct sim_pd_rooms *r, uint64_t room);

/* Ask the prefill sim at host:port whether <room> is bootstrapped: 1 yes, 0 not yet, -1 it
 * could not be asked. One blocking GET (loopback in tests; 1 s timeouts). */
int sim_pd_room_ask(const char *host, unsigned port, uint64_t room);

#endif
