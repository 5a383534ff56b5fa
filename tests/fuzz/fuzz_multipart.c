/* fuzz_multipart.c - libFuzzer harness for the server's multipart/form-data
 * bodies: libmicrohttpd's post processor (the parser the server uses) feeding
 * app/serve_form.c's per-field buffers, then the fields as JSON. One daemon
 * without a listening socket (driven by MHD_run in this thread, so that an
 * execution waits on no other thread) takes each input as a request on one
 * end of a socketpair: a POST whose body is the input (the first byte picks the
 * boundary and the caps). Text fields must stay within their cap, the file
 * part within its own, and every field name given must be kept or refused. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve_form.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    char *body;
    size_t len;
    size_t text_cap, file_cap;
} req;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    (void)cls, (void)url, (void)method, (void)version;
    req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        const char *caps = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Caps");
        r->text_cap = caps && caps[0] == '1' ? 16 : 32768;
        r->file_cap = caps && caps[0] == '1' ? 64 : 1 << 20;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_size) {
        r->body = realloc(r->body, r->len + *upload_size + 1);
        memcpy(r->body + r->len, upload, *upload_size);
        r->len += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    form_ctx f = {.text_cap = r->text_cap, .file_cap = r->file_cap};
    struct MHD_PostProcessor *pp = MHD_create_post_processor(c, 64 * 1024, form_piece, &f);
    int status = 400;
    if (pp) {
        if (MHD_post_process(pp, r->body ? r->body : "", r->len) == MHD_YES) status = 200;
        MHD_destroy_post_processor(pp);
    }
    for (int i = 0; i < f.nfields; i++)
        if (f.fields[i].value.len > f.text_cap || (f.fields[i].oversized && !f.fields[i].value.p &&
                                                   f.fields[i].value.len))
            abort();
    if (f.file.len > f.file_cap || f.nfields > FORM_MAX_FIELDS) abort();
    json_t *o = NULL;
    char param[64], err[256];
    if (form_fields_json(&f, &o, param, sizeof param, err, sizeof err)) {
        for (int i = 0; i < f.nfields; i++)
            if (!f.fields[i].oversized && !json_object_get(o, f.fields[i].key)) abort();
        json_decref(o);
    } else if (!err[0] || o) {
        abort();
    }
    form_free(&f);
    struct MHD_Response *res = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, res);
    MHD_destroy_response(res);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    req *r = *con_cls;
    if (r) free(r->body);
    free(r);
    *con_cls = NULL;
}

static struct MHD_Daemon *daemon_once(void) {
    static struct MHD_Daemon *d;
    if (!d)
        d = MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET, /* driven by MHD_run below: one thread */
                             0, NULL, NULL, on_request, NULL, MHD_OPTION_NOTIFY_COMPLETED,
                             on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 5u, MHD_OPTION_END);
    if (!d) abort();
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    struct MHD_Daemon *d = daemon_once();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (MHD_add_connection(d, sv[1], (struct sockaddr *)&a, sizeof a) != MHD_YES) abort();
    /* byte 0: bit 0 small caps, bit 1 a quoted boundary */
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "POST /v1/videos HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Caps: %c\r\n"
                      "Content-Type: multipart/form-data; boundary=%s\r\nContent-Length: %zu\r\n\r\n",
                      data[0] & 1 ? '1' : '0', data[0] & 2 ? "\"XyZ\"" : "XyZ", size - 1);
    if (write(sv[0], head, (size_t)hn) != hn) abort();
    for (size_t off = 1; off < size;) {
        ssize_t w = write(sv[0], data + off, size - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    /* drive the daemon in this thread until it closes the connection */
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    char buf[4096];
    for (int i = 0; i < 100000; i++) {
        if (MHD_run(d) != MHD_YES) abort();
        ssize_t r = read(sv[0], buf, sizeof buf);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
    }
    close(sv[0]);
    return 0;
}
