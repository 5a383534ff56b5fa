/* serve_store.c - the /v1/videos job store (see serve_store.h): SQLite for
 * the jobs, one file per finished video beside it. */
#include "config.h"

#if COSMOS3_HAVE_MHD /* built with serve (meson: sqlite3 with libmicrohttpd) */

#include "serve_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define STORE_DB "jobs.db"
#define STORE_LOCK "lock"
#define STORE_VIDEOS "videos"
#define STORE_BUSY_MS 5000 /* a locked database is waited for this long */

/* The statements the server runs after the start (prepared once). */
enum { Q_ADD, Q_RUNNING, Q_SEQ, Q_COMPLETE, Q_FAIL, Q_FILE, Q_FORGET_FILE, Q_FORGET, QS };
static const char *const q_sql[QS] = {
    [Q_ADD] = "INSERT INTO videos (id, status, created_at, object) VALUES (?1, 'queued', ?2, ?3)",
    [Q_RUNNING] = "UPDATE videos SET status = 'in_progress' WHERE id = ?1 AND status = 'queued'",
    [Q_SEQ] = "SELECT seq FROM videos WHERE id = ?1",
    [Q_COMPLETE] =
        "UPDATE videos SET status = 'completed', completed_at = ?2, file = ?3, bytes = ?4, "
        "object = ?5, error = NULL WHERE id = ?1 AND status IN ('queued', 'in_progress')",
    [Q_FAIL] = "UPDATE videos SET status = 'failed', completed_at = ?2, error = ?3 "
               "WHERE id = ?1 AND status IN ('queued', 'in_progress')",
    [Q_FILE] = "SELECT file FROM videos WHERE id = ?1 AND status = 'completed'",
    [Q_FORGET_FILE] = "SELECT file FROM videos WHERE id = ?1",
    [Q_FORGET] = "DELETE FROM videos WHERE id = ?1",
};

struct c3_store {
    pthread_mutex_t mu; /* every call: one writer */
    sqlite3 *db;
    sqlite3_stmt *q[QS];
    char *dir, *path, *videos;
    int lock_fd;
};

/* ------------------------------------------------------------ errors */

/* An SQLite failure as a status: what a full disk or a read-only file
 * means (EOUTPUT), a corrupt file (ERESOURCE), else EFAIL. */
static int sql_fail(c3_store *st, int rc, const char *call, int line) {
    int prim = rc & 0xff;
    int code = prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT ? COSMOS3_ERESOURCE
               : prim == SQLITE_FULL || prim == SQLITE_READONLY || prim == SQLITE_CANTOPEN ||
                       prim == SQLITE_IOERR || prim == SQLITE_PERM
                   ? COSMOS3_EOUTPUT
                   : COSMOS3_EFAIL;
    const char *msg = st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc);
    if (code == COSMOS3_ERESOURCE)
        return c3_fail(code,
                       "the job store %s is corrupt (SQLite: %s); move it away or give --store "
                       "another folder",
                       st->path, msg);
    return c3_fail(code, "the job store %s: %s (serve_store.c:%d: %s)", st->path, msg, line, call);
}

/* Every SQLite call: OK, ROW and DONE go on, anything else returns its
 * status from the calling function. */
#define SQL(st, call)                                                                              \
    do {                                                                                           \
        int sql_rc_ = (call);                                                                      \
        if (sql_rc_ != SQLITE_OK && sql_rc_ != SQLITE_ROW && sql_rc_ != SQLITE_DONE)               \
            return sql_fail((st), sql_rc_, #call, __LINE__);                                       \
    } while (0)

/* Run a statement without results. */
static int exec(c3_store *st, const char *sql) {
    SQL(st, sqlite3_exec(st->db, sql, NULL, NULL, NULL));
    return COSMOS3_OK;
}

/* One integer from a query (a PRAGMA, a count). */
static int query_int(c3_store *st, const char *sql, int64_t *v) {
    sqlite3_stmt *s = NULL;
    SQL(st, sqlite3_prepare_v2(st->db, sql, -1, &s, NULL));
    int r = sqlite3_step(s);
    *v = r == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_finalize(s);
    SQL(st, r);
    return COSMOS3_OK;
}

/* A prepared statement, reset and cleared for its next use. */
static sqlite3_stmt *q(c3_store *st, int k) {
    sqlite3_reset(st->q[k]);
    sqlite3_clear_bindings(st->q[k]);
    return st->q[k];
}

/* Roll back a transaction a failure left open. */
static void rollback(c3_store *st) {
    if (!sqlite3_get_autocommit(st->db)) sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

/* ------------------------------------------------------------ folder */

void store_default_dir(const char *given, char *buf, size_t n) {
    const char *x = getenv("XDG_STATE_HOME"), *h = getenv("HOME");
    if (given && *given)
        snprintf(buf, n, "%s", given);
    else if (x && *x)
        snprintf(buf, n, "%s/cosmos3", x);
    else
        snprintf(buf, n, "%s/.local/state/cosmos3", h && *h ? h : ".");
}

/* The folder (0700 when made here) and its videos/ folder, writable. */
static int make_dir(const char *dir, const char *videos) {
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        char *parent = xstrdup(dir);
        char *slash = strrchr(parent, '/');
        while (slash && slash > parent && slash[1] == 0) { /* "a/b/" */
            *slash = 0;
            slash = strrchr(parent, '/');
        }
        int rc = COSMOS3_OK;
        if (slash && slash > parent) {
            *slash = 0;
            rc = c3_mkdir_p(parent);
        }
        free(parent);
        if (rc == COSMOS3_OK && mkdir(dir, 0700) != 0 && errno != EEXIST)
            rc = c3_fail(COSMOS3_EOUTPUT, "cannot create folder %s: %s", dir, strerror(errno));
        if (rc) {
            char m[512];
            snprintf(m, sizeof m, "%s", c3_errmsg());
            return c3_fail(COSMOS3_EOUTPUT,
                           "the job store: %s; give --store a folder this user can write", m);
        }
    } else if (!S_ISDIR(sb.st_mode)) {
        return c3_fail(COSMOS3_EOUTPUT,
                       "the job store %s is not a folder; give --store a folder this user can "
                       "write",
                       dir);
    }
    if (access(dir, W_OK | X_OK) != 0 || (mkdir(videos, 0700) != 0 && errno != EEXIST) ||
        access(videos, W_OK | X_OK) != 0)
        return c3_fail(COSMOS3_EOUTPUT,
                       "the job store folder %s cannot be written (%s); give --store a folder "
                       "this user can write",
                       dir, strerror(errno));
    return COSMOS3_OK;
}

/* The folder's lock: one server per store. */
static int take_lock(c3_store *st) {
    char *p = c3_path_join(st->dir, STORE_LOCK);
    st->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    int rc = COSMOS3_OK;
    if (st->lock_fd < 0) {
        rc = c3_fail(COSMOS3_EOUTPUT,
                     "the job store's lock %s cannot be opened (%s); give --store a folder this "
                     "user can write",
                     p, strerror(errno));
    } else if (flock(st->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t k = pread(st->lock_fd, pid, sizeof pid - 1, 0);
        pid[k > 0 ? k : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        rc = c3_fail(COSMOS3_ERESOURCE,
                     "the job store %s is in use by another cosmos3 serve%s%s%s; give each "
                     "server its own --store",
                     st->dir, pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "");
    } else {
        char pid[32];
        int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(st->lock_fd, 0) == 0 && pwrite(st->lock_fd, pid, (size_t)k, 0) < 0) {
            /* the pid is only for the message above */
        }
    }
    free(p);
    return rc;
}

/* ---------------------------------------------------------- database */

static int refuse(c3_store *st, const char *why) {
    return c3_fail(COSMOS3_ERESOURCE,
                   "%s is not a cosmos3 job store (%s); move it away or give --store another "
                   "folder",
                   st->path, why);
}

static int configure(c3_store *st) {
    SQL(st, sqlite3_extended_result_codes(st->db, 1));
    SQL(st, sqlite3_busy_timeout(st->db, STORE_BUSY_MS));
    return COSMOS3_OK;
}

/* WAL mode (readers beside the one writer); a file system without the
 * shared memory it needs is named. */
static int wal(c3_store *st) {
    sqlite3_stmt *s = NULL;
    SQL(st, sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL));
    int r = sqlite3_step(s);
    const char *m = r == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
    bool on = m && !strcmp(m, "wal");
    sqlite3_finalize(s);
    SQL(st, r);
    if (!on)
        return c3_fail(COSMOS3_EOUTPUT,
                       "the job store %s cannot use SQLite's WAL mode here; give --store a "
                       "folder on a local file system",
                       st->path);
    return COSMOS3_OK;
}

/* Ours (application_id, user_version), or new and made ours; then
 * checked (quick_check) and in WAL mode. Nothing is written into a file
 * that is refused. */
static int check_schema(c3_store *st) {
    int64_t app = 0, ver = 0, objs = 0;
    int r = query_int(st, "PRAGMA application_id", &app);
    if (r) { /* not a database at all */
        const char *m = sqlite3_errmsg(st->db);
        return refuse(st, m && *m ? m : "not an SQLite database");
    }
    C3_TRY(query_int(st, "PRAGMA user_version", &ver));
    C3_TRY(query_int(st, "SELECT count(*) FROM sqlite_master", &objs));
    if (app == 0 && ver == 0 && objs == 0) { /* new (or empty): ours from now on */
        C3_TRY(wal(st));
        static const char schema[] =
            "BEGIN IMMEDIATE;"
            "CREATE TABLE videos ("
            " seq INTEGER PRIMARY KEY AUTOINCREMENT," /* creation order; names the file */
            " id TEXT NOT NULL UNIQUE,"               /* the job id, opaque */
            " status TEXT NOT NULL CHECK (status IN"
            "  ('queued', 'in_progress', 'completed', 'failed')),"
            " created_at INTEGER NOT NULL,"
            " completed_at INTEGER,"
            " error TEXT," /* why it failed */
            " file TEXT,"  /* the result under videos/ (completed) */
            " bytes INTEGER NOT NULL DEFAULT 0,"
            " object TEXT NOT NULL);"             /* the video object, JSON */
            "PRAGMA application_id = 1664313971;" /* STORE_APP_ID */
            "PRAGMA user_version = 1;"            /* STORE_SCHEMA */
            "COMMIT;";
        _Static_assert(STORE_APP_ID == 1664313971 && STORE_SCHEMA == 1,
                       "the schema text names STORE_APP_ID and STORE_SCHEMA");
        int rc = exec(st, schema);
        if (rc) rollback(st);
        return rc;
    }
    char why[160];
    if (app != STORE_APP_ID) {
        if (app)
            snprintf(why, sizeof why, "another program's database: application_id 0x%08" PRIx64,
                     app);
        else
            snprintf(why, sizeof why, "an SQLite database without cosmos3's application_id");
        return refuse(st, why);
    }
    if (ver > STORE_SCHEMA) {
        return c3_fail(COSMOS3_ERESOURCE,
                       "%s was written by a newer cosmos3 (schema %" PRId64
                       ", this one reads %d); run that version, or move it away or give --store "
                       "another folder",
                       st->path, ver, STORE_SCHEMA);
    }
    if (ver < 1) return refuse(st, "cosmos3's application_id but no schema version");
    /* ver < STORE_SCHEMA: later versions migrate here */
    sqlite3_stmt *s = NULL;
    SQL(st, sqlite3_prepare_v2(st->db, "PRAGMA quick_check", -1, &s, NULL));
    r = sqlite3_step(s);
    const char *ok = r == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
    char res[200];
    snprintf(res, sizeof res, "%s", ok ? ok : sqlite3_errmsg(st->db));
    sqlite3_finalize(s);
    if (strcmp(res, "ok"))
        return c3_fail(COSMOS3_ERESOURCE,
                       "the job store %s is corrupt (SQLite: %s); move it away or give --store "
                       "another folder",
                       st->path, res);
    return wal(st);
}

/* A completed row whose file is gone: failed, saying so. */
static int mark_lost(c3_store *st, const char *id) {
    sqlite3_stmt *u = NULL;
    SQL(st, sqlite3_prepare_v2(st->db,
                               "UPDATE videos SET status = 'failed', file = NULL, bytes = 0, "
                               "error = 'its video file was missing when the server started' "
                               "WHERE id = ?1",
                               -1, &u, NULL));
    int r = sqlite3_bind_text(u, 1, id, -1, SQLITE_TRANSIENT);
    if (r == SQLITE_OK) r = sqlite3_step(u);
    sqlite3_finalize(u);
    SQL(st, r);
    return COSMOS3_OK;
}

/* A row names this file under videos/. */
static int file_held(c3_store *st, const char *name, bool *held) {
    sqlite3_stmt *s = NULL;
    SQL(st, sqlite3_prepare_v2(st->db, "SELECT 1 FROM videos WHERE file = ?1", -1, &s, NULL));
    int r = sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
    if (r == SQLITE_OK) r = sqlite3_step(s);
    *held = r == SQLITE_ROW;
    sqlite3_finalize(s);
    SQL(st, r);
    return COSMOS3_OK;
}

/* The start: unfinished jobs failed, rows whose file is gone failed, files
 * without a row removed, then the bounds. */
static int recover(c3_store *st, int keep, int64_t max_bytes) {
    int64_t now = (int64_t)time(NULL);
    char sql[512];
    snprintf(sql, sizeof sql,
             "UPDATE videos SET status = 'failed', completed_at = %" PRId64
             ", error = '" STORE_RESTARTED "' WHERE status IN ('queued', 'in_progress')",
             now);
    C3_TRY(exec(st, sql));
    /* completed rows: their files are there */
    sqlite3_stmt *s = NULL;
    SQL(st, sqlite3_prepare_v2(st->db, "SELECT id, file FROM videos WHERE status = 'completed'", -1,
                               &s, NULL));
    char **lost = NULL;
    int nlost = 0, r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        const char *f = (const char *)sqlite3_column_text(s, 1);
        char *p = c3_path_join(st->videos, f ? f : "");
        struct stat sb;
        if (!f || strchr(f, '/') || stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            lost = xrealloc(lost, (size_t)(nlost + 1) * sizeof *lost);
            lost[nlost++] = xstrdup((const char *)sqlite3_column_text(s, 0));
        }
        free(p);
    }
    sqlite3_finalize(s);
    int rc = r == SQLITE_DONE ? COSMOS3_OK : sql_fail(st, r, "sqlite3_step(completed)", __LINE__);
    for (int i = 0; i < nlost; i++) {
        if (rc == COSMOS3_OK) rc = mark_lost(st, lost[i]);
        free(lost[i]);
    }
    free(lost);
    C3_TRY(rc);
    /* the bounds: finished jobs beyond keep or max_bytes, oldest first */
    for (;;) {
        int64_t done = 0, bytes = 0;
        C3_TRY(query_int(st, "SELECT count(*) FROM videos", &done));
        C3_TRY(query_int(st, "SELECT coalesce(sum(bytes), 0) FROM videos", &bytes));
        if (done == 0 || (done <= keep && bytes <= max_bytes)) break;
        C3_TRY(exec(st, "DELETE FROM videos WHERE seq = (SELECT min(seq) FROM videos)"));
    }
    /* files without a row (a crash between the rename and the row; a temp
     * file; a dropped job's) */
    DIR *d = opendir(st->videos);
    if (!d)
        return c3_fail(COSMOS3_EOUTPUT, "the job store folder %s cannot be read: %s", st->videos,
                       strerror(errno));
    struct dirent *e;
    rc = COSMOS3_OK;
    while (rc == COSMOS3_OK && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        bool held = false;
        rc = file_held(st, e->d_name, &held);
        if (rc || held) continue;
        char *p = c3_path_join(st->videos, e->d_name);
        unlink(p); /* best effort: what cannot go stays */
        free(p);
    }
    closedir(d);
    return rc;
}

int store_open(c3_store **out, const char *dir, int keep, int64_t max_bytes) {
    *out = NULL;
    c3_store *st = xcalloc(1, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    st->lock_fd = -1;
    st->dir = xstrdup(dir);
    st->path = c3_path_join(dir, STORE_DB);
    st->videos = c3_path_join(dir, STORE_VIDEOS);
    int rc = make_dir(st->dir, st->videos);
    if (rc == COSMOS3_OK) rc = take_lock(st);
    struct stat sb;
    if (rc == COSMOS3_OK && lstat(st->path, &sb) == 0 && !S_ISREG(sb.st_mode))
        rc = refuse(st, "not a regular file");
    if (rc == COSMOS3_OK) {
        int r = sqlite3_open_v2(st->path, &st->db,
                                SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW |
                                    SQLITE_OPEN_FULLMUTEX,
                                NULL);
        if (r != SQLITE_OK) rc = sql_fail(st, r, "sqlite3_open_v2", __LINE__);
    }
    if (rc == COSMOS3_OK) rc = configure(st);
    if (rc == COSMOS3_OK) rc = check_schema(st);
    if (rc == COSMOS3_OK) rc = exec(st, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON");
    if (rc == COSMOS3_OK) rc = recover(st, keep, max_bytes);
    for (int k = 0; k < QS && rc == COSMOS3_OK; k++) {
        int r =
            sqlite3_prepare_v3(st->db, q_sql[k], -1, SQLITE_PREPARE_PERSISTENT, &st->q[k], NULL);
        if (r != SQLITE_OK) rc = sql_fail(st, r, q_sql[k], __LINE__);
    }
    if (rc) {
        store_close(st);
        return rc;
    }
    *out = st;
    return COSMOS3_OK;
}

void store_close(c3_store *st) {
    if (!st) return;
    for (int k = 0; k < QS; k++)
        sqlite3_finalize(st->q[k]);
    sqlite3_close(st->db);
    if (st->lock_fd >= 0) close(st->lock_fd); /* the lock goes with it */
    pthread_mutex_destroy(&st->mu);
    free(st->dir);
    free(st->path);
    free(st->videos);
    free(st);
}

const char *store_path(const c3_store *st) {
    return st->path;
}

/* ------------------------------------------------------------- rows */

static int rows_locked(c3_store *st, store_row **rows, int *n) {
    sqlite3_stmt *s = NULL;
    SQL(st, sqlite3_prepare_v2(st->db,
                               "SELECT id, status, created_at, completed_at, bytes, error, object "
                               "FROM videos WHERE status IN ('completed', 'failed') ORDER BY seq",
                               -1, &s, NULL));
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        *rows = xrealloc(*rows, (size_t)(*n + 1) * sizeof **rows);
        store_row *w = &(*rows)[(*n)++];
        memset(w, 0, sizeof *w);
        w->id = xstrdup((const char *)sqlite3_column_text(s, 0));
        w->completed = !strcmp((const char *)sqlite3_column_text(s, 1), "completed");
        w->created_at = sqlite3_column_int64(s, 2);
        w->completed_at = sqlite3_column_int64(s, 3);
        w->bytes = sqlite3_column_int64(s, 4);
        const char *err = (const char *)sqlite3_column_text(s, 5);
        if (!w->completed) w->error = xstrdup(err ? err : "failed");
        const char *obj = (const char *)sqlite3_column_text(s, 6);
        json_t *o = obj ? json_loads(obj, 0, NULL) : NULL;
        if (!json_is_object(o)) { /* only this program writes it; still, never a NULL */
            json_decref(o);
            o = json_pack("{s:s,s:s}", "id", w->id, "object", "video");
        }
        /* the row's word on what changed since the object was stored */
        json_object_set_new(o, "status", json_string(w->completed ? "completed" : "failed"));
        json_object_set_new(o, "created_at", json_integer((json_int_t)w->created_at));
        json_object_set_new(o, "completed_at", json_integer((json_int_t)w->completed_at));
        if (w->completed) {
            json_object_set_new(o, "progress", json_integer(100));
            json_object_set_new(o, "bytes", json_integer((json_int_t)w->bytes));
            json_object_set_new(o, "error", json_null());
        } else {
            json_object_del(o, "bytes");
            json_object_set_new(
                o, "error",
                json_pack("{s:s,s:s}", "code", "generation_failed", "message", w->error));
        }
        w->object = o;
    }
    sqlite3_finalize(s);
    SQL(st, r);
    return COSMOS3_OK;
}

int store_rows(c3_store *st, store_row **rows, int *n) {
    *rows = NULL;
    *n = 0;
    pthread_mutex_lock(&st->mu);
    int rc = rows_locked(st, rows, n);
    pthread_mutex_unlock(&st->mu);
    if (rc) {
        store_rows_free(*rows, *n);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

void store_rows_free(store_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        free(rows[i].id);
        free(rows[i].error);
        json_decref(rows[i].object);
    }
    free(rows);
}

/* ----------------------------------------------------------- changes */

/* Statement qi with its three parameters (text id, an integer time, text),
 * run once: adding a row, failing one. */
static int run_tit(c3_store *st, int qi, const char *id, int64_t t, const char *text) {
    sqlite3_stmt *s = q(st, qi);
    SQL(st, sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC));
    SQL(st, sqlite3_bind_int64(s, 2, t));
    SQL(st, sqlite3_bind_text(s, 3, text, -1, SQLITE_STATIC));
    SQL(st, sqlite3_step(s));
    return COSMOS3_OK;
}

static int add_locked(c3_store *st, const char *id, int64_t created_at, const char *obj) {
    return run_tit(st, Q_ADD, id, created_at, obj);
}

static char *dump(json_t *o) {
    char *t = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    return t ? t : xstrdup("{}");
}

int store_add(c3_store *st, const char *id, int64_t created_at, json_t *object) {
    char *obj = dump(object);
    pthread_mutex_lock(&st->mu);
    int rc = add_locked(st, id, created_at, obj);
    pthread_mutex_unlock(&st->mu);
    free(obj);
    return rc;
}

static int step1(c3_store *st, int k, const char *id) {
    sqlite3_stmt *s = q(st, k);
    SQL(st, sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC));
    SQL(st, sqlite3_step(s));
    return COSMOS3_OK;
}

int store_running(c3_store *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    int rc = step1(st, Q_RUNNING, id);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* The job's row number (0: no such job). */
static int seq_locked(c3_store *st, const char *id, int64_t *seq) {
    sqlite3_stmt *s = q(st, Q_SEQ);
    SQL(st, sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC));
    int r = sqlite3_step(s);
    SQL(st, r);
    *seq = r == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    return COSMOS3_OK;
}

static int complete_locked(c3_store *st, const char *id, int64_t completed_at, const char *file,
                           size_t len, const char *obj, bool *changed) {
    sqlite3_stmt *s = q(st, Q_COMPLETE);
    SQL(st, sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC));
    SQL(st, sqlite3_bind_int64(s, 2, completed_at));
    SQL(st, sqlite3_bind_text(s, 3, file, -1, SQLITE_STATIC));
    SQL(st, sqlite3_bind_int64(s, 4, (sqlite3_int64)len));
    SQL(st, sqlite3_bind_text(s, 5, obj, -1, SQLITE_STATIC));
    SQL(st, sqlite3_step(s));
    *changed = sqlite3_changes(st->db) > 0;
    return COSMOS3_OK;
}

int store_complete(c3_store *st, const char *id, const void *data, size_t len, const char *ext,
                   int64_t completed_at, json_t *object) {
    int64_t seq = 0;
    pthread_mutex_lock(&st->mu);
    int rc = seq_locked(st, id, &seq);
    pthread_mutex_unlock(&st->mu);
    if (rc || !seq) return rc; /* deleted meanwhile: nothing to keep */
    char file[64];
    snprintf(file, sizeof file, "%" PRId64 ".%s", seq, ext);
    char *path = c3_path_join(st->videos, file);
    /* whole on the disk (outside the mutex: its name is this row's alone)... */
    rc = c3_write_file_atomic(path, data, len, true);
    if (rc) {
        rc = c3_context(COSMOS3_EOUTPUT, "the job store cannot keep the video");
        free(path);
        return rc;
    }
    /* ... before the row says completed */
    char *obj = dump(object);
    bool changed = false;
    pthread_mutex_lock(&st->mu);
    rc = complete_locked(st, id, completed_at, file, len, obj, &changed);
    pthread_mutex_unlock(&st->mu);
    if (rc || !changed) unlink(path); /* no row holds it */
    free(obj);
    free(path);
    return rc;
}

static int fail_locked(c3_store *st, const char *id, int64_t completed_at, const char *error) {
    return run_tit(st, Q_FAIL, id, completed_at, error);
}

int store_fail(c3_store *st, const char *id, int64_t completed_at, const char *error) {
    pthread_mutex_lock(&st->mu);
    int rc = fail_locked(st, id, completed_at, error ? error : "failed");
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* The file of a job's row (k: which query), or NULL. */
static int file_locked(c3_store *st, int k, const char *id, char **path) {
    *path = NULL;
    sqlite3_stmt *s = q(st, k);
    SQL(st, sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC));
    int r = sqlite3_step(s);
    SQL(st, r);
    const char *f = r == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
    if (f && *f && !strchr(f, '/')) *path = c3_path_join(st->videos, f);
    return COSMOS3_OK;
}

int store_content(c3_store *st, const char *id, uint8_t **data, size_t *len) {
    *data = NULL;
    *len = 0;
    char *path = NULL;
    pthread_mutex_lock(&st->mu);
    int rc = file_locked(st, Q_FILE, id, &path);
    pthread_mutex_unlock(&st->mu);
    if (rc) return rc;
    if (!path) return c3_fail(COSMOS3_EINPUT, "%s has no video in the job store", id);
    /* outside the mutex: a file is whole once named, and one removed
     * meanwhile reads as gone */
    char *buf = NULL;
    rc = c3_read_file(path, &buf, len);
    free(path);
    if (rc) return c3_fail(COSMOS3_EINPUT, "%s: its video is gone from the job store", id);
    *data = (uint8_t *)buf;
    return COSMOS3_OK;
}

static int forget_locked(c3_store *st, const char *id) {
    char *path = NULL;
    C3_TRY(file_locked(st, Q_FORGET_FILE, id, &path));
    int rc = step1(st, Q_FORGET, id);
    if (rc == COSMOS3_OK && path) unlink(path); /* the row is gone: the file is nobody's */
    free(path);
    return rc;
}

int store_forget(c3_store *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    int rc = forget_locked(st, id);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

#endif
