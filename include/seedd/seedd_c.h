/* libseedd_c: a small C API of libseedd, for languages that load a shared
 * library (the Python package loads it with ctypes, so one build serves every
 * CPython version).
 *
 * Conventions:
 * - Values cross as JSON text (UTF-8, NUL-terminated): options, requests,
 *   results. The fields of each are named where the function is declared.
 * - A function returning int returns 0 on success, else a seedd status code
 *   (the numbers of seedd::StatusCode); then *error, when given, receives
 *   {"code": NAME, "message": TEXT, "detail": TEXT without the code} as JSON
 *   text, with "argument": true when the call's own arguments are at fault
 *   (its options, the files they name, the request), found before any byte
 *   went to a peer.
 * - Every char* this library hands out is freed with seedd_free.
 * - Every function may be called from any thread; handles are used by one
 *   thread at a time except where said.
 */
#ifndef SEEDD_SEEDD_C_H_
#define SEEDD_SEEDD_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library ("0.1.0"); static storage. */
const char* seedd_version(void);

void seedd_free(char* text);

/* The library's log lines at `level` ("trace" ... "critical", "off") and above. */
int seedd_set_log_level(const char* level, char** error);

/* Receives each log line instead of stderr (level: 0 trace ... 5 critical);
 * called on the thread that logs. NULL: back to stderr. */
typedef void (*seedd_log_fn)(int level, const char* message);
void seedd_set_log_handler(seedd_log_fn handler);

/* A seedable's resolve, called on the listener's threads (several at once):
 * kind and request (JSON text) in; the answer goes into `out` with
 * seedd_answer_set. Returns 0: `out` holds the payload's JSON text; 1: a miss;
 * 2: invalid request (out: the message, sent to the peer); 3: an internal
 * failure (out: the message). */
typedef struct seedd_answer seedd_answer;
typedef int (*seedd_resolve_fn)(void* user, const char* kind, const char* request,
                                seedd_answer* out);
void seedd_answer_set(seedd_answer* out, const char* text, size_t size);

/* The control-channel listener. options: {"kinds": [NAME...], "listen": [HOST,
 * PORT], "token", "max_connections", "max_resolver_threads", "tls_cert",
 * "tls_key", "tls_ca"}. */
typedef struct seedd_server seedd_server;
int seedd_server_create(const char* options, seedd_resolve_fn resolve, void* user,
                        seedd_server** out, char** error);
/* *address: [HOST, PORT] as bound. */
int seedd_server_start(seedd_server* server, char** address, char** error);
/* Stops accepting and waits for the resolves under way (thread-safe). */
void seedd_server_close(seedd_server* server);
size_t seedd_server_open_connections(const seedd_server* server);
void seedd_server_destroy(seedd_server* server);

/* One request, one response on the control channel. options: {"host", "port",
 * "connect_timeout", "response_timeout" (seconds), "tls_ca", "tls_cert",
 * "tls_key"}; *response: the response's JSON text. */
int seedd_exchange(const char* options, const char* request, char** response, char** error);

/* A weights pull on a thread of its own. options: {"model", "into", "sources":
 * [HOST:PORT...], "token", "root_digest", "timeout", "replace", "verify_sha256",
 * "verify_upstream" (an oci:// or s3:// URL that vouches for the model:
 * PullOptions::upstream),
 * "origin_auth", "origin_ca", "connections", "max_neighbours", "tls_ca", "tls_cert",
 * "tls_key", "reuse_from": [DIR...], "trust_keys": [PATH...], "order" ("index": files
 * complete in the manifest's order, PullOptions::order)}. Or the model from
 * where it lives, with no daemon: {"from": an oci:// or s3:// URL, "into",
 * "replace", "reuse_from", "origin_auth", "origin_ca"} (PullFromOrigin); its progress has
 * the upstream as its one source and its result is {"from", "into",
 * "version", "files", "total_bytes", "bytes_fetched", "bytes_reused",
 * "files_unverified", "seconds"}. */
typedef struct seedd_pull seedd_pull;
int seedd_pull_start(const char* options, seedd_pull** out, char** error);
/* 1 once the pull has ended, else 0 after at most timeout_ms. */
int seedd_pull_wait(seedd_pull* pull, int timeout_ms);
/* 1 and *progress ({"verified_bytes", "total_bytes", "resumed_bytes",
 * "sources", "files_ready": [PATH...] whole and verified since the last call,
 * "staging": where they are until the pull commits}) when there is progress
 * not yet taken, else 0. */
int seedd_pull_progress(seedd_pull* pull, char** progress);
/* Asks the pull to stop (thread-safe); it ends within about 50 ms. */
void seedd_pull_cancel(seedd_pull* pull);
/* Once ended: *result, {"model", "root_digest", "total_bytes", "seconds",
 * "up_to_date", "bytes_received", ..., "used": [...]}, or the error. */
int seedd_pull_result(seedd_pull* pull, char** result, char** error);
/* Cancels the pull if still running and waits for it. */
void seedd_pull_destroy(seedd_pull* pull);

/* A manifest built from a directory. options: {"model", "dir", "chunk_size",
 * "sources": [...]}. *manifest: its JSON text. */
int seedd_build_manifest(const char* options, char** manifest, char** error);
/* A manifest's JSON text validated and written back. */
int seedd_parse_manifest(const char* text, char** manifest, char** error);

#ifdef __cplusplus
}
#endif

#endif /* SEEDD_SEEDD_C_H_ */
