/* serve.h - `cosmos3 serve`: the OpenAI-compatible image API.
 *
 *   POST /v1/images/generations   JSON answer, or Server-Sent Events with "stream": true
 *   GET  /v1/models               the one loaded model
 *   GET  /health                  503 while loading (or shutting down), 200 when ready
 *   GET  /metrics                 Prometheus text
 *
 * The model is loaded once (the layout checked first, as for gen); one worker
 * thread owns the engine and runs requests one at a time from a bounded FIFO
 * (a full queue answers 429 with Retry-After). A client that disconnects
 * cancels its generation. SIGTERM or SIGINT: new requests get 503, waiting
 * ones are cancelled, the one running finishes (a second signal cancels it),
 * then the server exits 0. Built on libmicrohttpd; without it `serve` says
 * how to get it. */
#ifndef COSMOS3_SERVE_H
#define COSMOS3_SERVE_H

#include "options.h"

/* The `serve` command: s is the parsed command line, pos the positional
 * arguments (none are taken). Returns when the server stops. */
int serve_main(c3_settings *s, char **pos, int npos);

#endif
