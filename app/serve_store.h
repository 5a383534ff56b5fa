/* serve_store.h - the /v1/videos job store: the jobs in an embedded SQLite
 * database and the finished videos beside it, under one folder (--store DIR,
 * default $XDG_STATE_HOME/cosmos3, else ~/.local/state/cosmos3; created 0700):
 *
 *   DIR/jobs.db (+ -wal, -shm)   one row per job: its id (opaque text), status,
 *                                times, error, result file and size, and the
 *                                video object as last answered (JSON)
 *   DIR/videos/SEQ.mp4           a completed job's bytes (SEQ: its row's)
 *   DIR/lock                     held (flock) by the one server using DIR
 *
 * A result file is written whole (temp + fsync + rename) before its row says
 * completed. When the server starts, jobs left queued or in progress are
 * failed with "the server restarted" (never lost without a word); files
 * without a row and left temp files are removed; the finished jobs beyond
 * --keep-videos or the bytes bound are dropped, oldest first. A database that
 * is not ours (application_id, user_version: the schema's version for later
 * migrations) or is corrupt is refused, nothing written into it.
 *
 * Concurrency: one connection, one writer: every call takes the store's
 * mutex (the server's threads serialise on it); the database is in WAL mode.
 * A result file is written outside the mutex (its name is its row's), so a
 * long write blocks no other call. Lock order: the server's mutex, then the
 * store's.
 *
 * Errors are values (c3_fail): COSMOS3_EOUTPUT when the folder cannot be
 * created or written, COSMOS3_ERESOURCE when the database is corrupt,
 * foreign, from a newer cosmos3 or held by another server. */
#ifndef COSMOS3_SERVE_STORE_H
#define COSMOS3_SERVE_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct c3_store c3_store;

#define STORE_SCHEMA 1          /* user_version of the database this file writes */
#define STORE_APP_ID 0x63336a73 /* application_id: "c3js" */
#define STORE_RESTARTED "the server restarted"

/* A finished job as the store gives it back when the server starts. */
typedef struct {
    char *id;
    bool completed; /* else failed */
    int64_t created_at, completed_at;
    int64_t bytes;  /* the result's (completed) */
    char *error;    /* why it failed (failed), else NULL */
    json_t *object; /* the video object, its status, progress, completed_at,
                       bytes and error set from the row */
} store_row;

/* The folder --store names, else the default, into buf. */
void store_default_dir(const char *given, char *buf, size_t n);
/* Open (create) the store in dir for one server: the checks, the recovery
 * and the bounds above (keep finished jobs, max_bytes of results). */
int store_open(c3_store **out, const char *dir, int keep, int64_t max_bytes);
void store_close(c3_store *st);
/* The database's path (for messages). */
const char *store_path(const c3_store *st);
/* The finished jobs, oldest first (store_rows_free frees them). */
int store_rows(c3_store *st, store_row **rows, int *n);
void store_rows_free(store_row *rows, int n);
/* A new job, queued; object: its video object. */
int store_add(c3_store *st, const char *id, int64_t created_at, json_t *object);
/* The job started running. */
int store_running(c3_store *st, const char *id);
/* The job's result: the file written whole, then the row completed (object:
 * its video object now). A job deleted meanwhile leaves nothing behind. */
int store_complete(c3_store *st, const char *id, const void *data, size_t len, const char *ext,
                   int64_t completed_at, json_t *object);
/* The job failed (not for a cancel: a job the server stopped before it
 * finished stays unfinished, failed at the next start). */
int store_fail(c3_store *st, const char *id, int64_t completed_at, const char *error);
/* A completed job's bytes (xmalloc'ed). COSMOS3_EINPUT: none. */
int store_content(c3_store *st, const char *id, uint8_t **data, size_t *len);
/* Forget a job: its row and its file. */
int store_forget(c3_store *st, const char *id);

#endif
