/* media.c - encode frames to MP4 / WebM / JPEG / WebP / PNG, decode pictures
 * and clips back to RGB frames, read the settings stored in any of them.
 *
 * FFmpeg's libraries do the codecs and containers; libjpeg(-turbo) writes
 * JPEG at a real quality 95 with its XMP marker; libwebpmux places the XMP
 * chunk in a WebP and libwebpdemux decodes animated WebP (FFmpeg 5.1's WebP
 * decoder takes stills only). Every FFmpeg call goes through AV_TRY.
 *
 * Memory I/O: a muxer writes into a growing buffer through a custom
 * AVIOContext that can seek; +faststart reads its own output back to move
 * the index to the front, so the format context's io_open hands it a second
 * reader over the same buffer.
 */
#include "media.h"

#include <ctype.h>
#include <dirent.h>
#include <glob.h>
#include <jansson.h>
#include <jpeglib.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <webp/demux.h>
#include <webp/mux.h>

#include "config.h"
#include "png_io.h"
#include "strbuf.h"

#if COSMOS3_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>

#include "ffmpeg_dl.h" /* the libraries loaded on first use: FFMPEG_NEED() */
#endif

#define MEDIA_IO_BUF (64 * 1024)
#define MEDIA_MAX_SIDE 16384
#define MEDIA_VP9_CRF_DEFAULT 24
#define MEDIA_XMP_MAX 65502 /* one JPEG APP1 segment, less the XMP namespace */
#define MEDIA_MAX_GLOB 100000

static const char xmp_ns_jpeg[] = "http://ns.adobe.com/xap/1.0/";

#if COSMOS3_HAVE_FFMPEG
/* Record an FFmpeg error (code < 0) for `call` on `name`. */
static int av_fail(int code, int e, const char *name, const char *call) {
    char buf[AV_ERROR_MAX_STRING_SIZE] = "";
    av_strerror(e, buf, sizeof buf);
    return c3_fail(code, "%s: %s: %s", name, call, buf);
}

/* Check an FFmpeg call: on a negative result record it (status `fail_code`
 * from the scope) and jump to `done`. */
#define AV_TRY(call)                                                                               \
    do {                                                                                           \
        int av_e_ = (call);                                                                        \
        if (av_e_ < 0) {                                                                           \
            rc = av_fail(fail_code, av_e_, name, #call);                                           \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
/* An allocation from FFmpeg that returns NULL on failure. */
#define AV_NEW(ptr, call)                                                                          \
    do {                                                                                           \
        if (((ptr) = (call)) == NULL) {                                                            \
            rc = c3_fail(COSMOS3_EFAIL, "%s: %s: out of memory", name, #call);                     \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* The libraries' own log lines off (ffmpeg_load does it): their errors come back as values. */
static void media_quiet(void) {}
#else
static void media_quiet(void) {}
/* Built with -Dmedia=disabled (the GPU machine's carried build): PNG and
 * JPEG out, PNG in; the rest says how to get it. */
static int no_ffmpeg(const char *what) {
    return c3_fail(
        COSMOS3_EUSAGE,
        "%s needs FFmpeg's libraries, and this cosmos3 was built without them (-Dmedia=disabled); "
        "use .png or .jpg, or rebuild with libavformat-dev libavcodec-dev libswscale-dev "
        "libavutil-dev",
        what);
}
#endif

/* ------------------------------------------------------------ formats */

static const struct {
    const char *ext, *name;
    c3_media_format f;
} exts[] = {
    {".png", "png", MEDIA_PNG},    {".jpg", "jpeg", MEDIA_JPEG}, {".jpeg", "jpeg", MEDIA_JPEG},
    {".webp", "webp", MEDIA_WEBP}, {".mp4", "mp4", MEDIA_MP4},   {".webm", "webm", MEDIA_WEBM},
};

const char *media_format_name(c3_media_format f) {
    static const char *names[] = {"png", "jpeg", "webp", "mp4", "webm"};
    return f < MEDIA_NFORMATS ? names[f] : "?";
}

const char *media_extensions(void) {
    return ".png, .jpg, .jpeg, .webp, .mp4, .webm";
}

bool media_format_is_video(c3_media_format f) {
    return f == MEDIA_MP4 || f == MEDIA_WEBM;
}

bool media_format_from_path(const char *path, c3_media_format *f) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return false;
    for (size_t i = 0; i < C3_ARRAY_LEN(exts); i++)
        if (!strcasecmp(dot, exts[i].ext)) {
            *f = exts[i].f;
            return true;
        }
    return false;
}

#if COSMOS3_HAVE_FFMPEG
/* --------------------------------------------------------- memory I/O */

typedef struct {
    uint8_t *data;
    size_t len, cap;
} membuf;

typedef struct {
    membuf *m;
    int64_t pos;
} memview;

static int mv_read(void *o, uint8_t *buf, int n) {
    memview *v = o;
    if (v->pos >= (int64_t)v->m->len) return AVERROR_EOF;
    size_t k = C3_MIN((size_t)n, v->m->len - (size_t)v->pos);
    memcpy(buf, v->m->data + v->pos, k);
    v->pos += (int64_t)k;
    return (int)k;
}

static int mv_write(void *o, uint8_t *buf, int n) {
    memview *v = o;
    membuf *m = v->m;
    size_t end = (size_t)v->pos + (size_t)n;
    if (end > m->cap) {
        m->cap = C3_MAX(m->cap * 2, end + MEDIA_IO_BUF);
        m->data = xrealloc(m->data, m->cap);
    }
    if ((size_t)v->pos > m->len) memset(m->data + m->len, 0, (size_t)v->pos - m->len);
    memcpy(m->data + v->pos, buf, (size_t)n);
    v->pos = (int64_t)end;
    if (end > m->len) m->len = end;
    return n;
}

static int64_t mv_seek(void *o, int64_t off, int whence) {
    memview *v = o;
    if (whence & AVSEEK_SIZE) return (int64_t)v->m->len;
    whence &= ~AVSEEK_FORCE;
    int64_t p = whence == SEEK_SET   ? off
                : whence == SEEK_CUR ? v->pos + off
                : whence == SEEK_END ? (int64_t)v->m->len + off
                                     : -1;
    if (p < 0) return AVERROR(EINVAL);
    v->pos = p;
    return p;
}

static AVIOContext *mv_open(memview *v, bool write) {
    uint8_t *buf = av_malloc(MEDIA_IO_BUF);
    if (!buf) return NULL;
    AVIOContext *pb =
        avio_alloc_context(buf, MEDIA_IO_BUF, write, v, mv_read, write ? mv_write : NULL, mv_seek);
    if (!pb) av_free(buf);
    return pb;
}

static void mv_close(AVIOContext **pb) {
    if (!*pb) return;
    av_freep(&(*pb)->buffer);
    avio_context_free(pb);
}

/* The muxer's second look at its own output (+faststart): a reader over the
 * same buffer, with its own position. */
static int mem_io_open(AVFormatContext *s, AVIOContext **pb, const char *url, int flags,
                       AVDictionary **opts) {
    (void)url;
    (void)opts;
    if (flags & AVIO_FLAG_WRITE) return AVERROR(EPERM);
    memview *v = av_mallocz(sizeof *v);
    if (!v) return AVERROR(ENOMEM);
    v->m = s->opaque;
    *pb = mv_open(v, false);
    if (!*pb) {
        av_free(v);
        return AVERROR(ENOMEM);
    }
    return 0;
}

static int mem_io_close(AVFormatContext *s, AVIOContext *pb) {
    (void)s;
    if (!pb) return 0;
    av_free(pb->opaque);
    mv_close(&pb);
    return 0;
}

#endif

/* --------------------------------------------------------------- XMP */

static void xml_escape(c3_sbuf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<':
            sb_puts(b, "&lt;");
            break;
        case '>':
            sb_puts(b, "&gt;");
            break;
        case '&':
            sb_puts(b, "&amp;");
            break;
        case '"':
            sb_puts(b, "&quot;");
            break;
        default:
            sb_add(b, s, 1);
        }
    }
}

/* An XMP packet holding both texts (cosmos3:parameters, cosmos3:settings)
 * and the parameters as dc:description for general readers. */
static char *xmp_packet(const c3_media_meta *m, bool with_parameters) {
    c3_sbuf b = {0};
    sb_puts(&b, "<?xpacket begin=\"\xef\xbb\xbf\" id=\"W5M0MpCehiHzreSzNTczkc9d\"?>"
                "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"><rdf:RDF "
                "xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\"><rdf:Description "
                "rdf:about=\"\" "
                "xmlns:dc=\"http://purl.org/dc/elements/1.1/\" "
                "xmlns:cosmos3=\"https://cosmos3.invalid/ns/1.0/\">");
    if (m->parameters && with_parameters) {
        sb_puts(&b, "<dc:description><rdf:Alt><rdf:li xml:lang=\"x-default\">");
        xml_escape(&b, m->parameters);
        sb_puts(&b, "</rdf:li></rdf:Alt></dc:description><cosmos3:parameters>");
        xml_escape(&b, m->parameters);
        sb_puts(&b, "</cosmos3:parameters>");
    }
    if (m->json) {
        sb_puts(&b, "<cosmos3:settings>");
        xml_escape(&b, m->json);
        sb_puts(&b, "</cosmos3:settings>");
    }
    sb_puts(&b, "</rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end=\"w\"?>");
    return b.p;
}

/* The text of <tag>...</tag> in an XMP packet, unescaped (xmalloc'd) or NULL. */
static char *xmp_get(const char *x, size_t n, const char *tag) {
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = memmem(x, n, open, strlen(open));
    if (!a) return NULL;
    a += strlen(open);
    const char *b = memmem(a, n - (size_t)(a - x), close, strlen(close));
    if (!b) return NULL;
    char *out = xmalloc((size_t)(b - a) + 1);
    size_t k = 0;
    static const struct {
        const char *ent;
        char c;
    } ents[] = {{"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&apos;", '\''}};
    while (a < b) {
        bool hit = false;
        if (*a == '&')
            for (size_t i = 0; i < C3_ARRAY_LEN(ents) && !hit; i++) {
                size_t L = strlen(ents[i].ent);
                if ((size_t)(b - a) >= L && !memcmp(a, ents[i].ent, L)) {
                    out[k++] = ents[i].c;
                    a += L;
                    hit = true;
                }
            }
        if (!hit) out[k++] = *a++;
    }
    out[k] = 0;
    return out;
}

static void xmp_read(const char *x, size_t n, char **parameters, char **json) {
    *parameters = xmp_get(x, n, "cosmos3:parameters");
    *json = xmp_get(x, n, "cosmos3:settings");
}

#if COSMOS3_HAVE_FFMPEG
/* ---------------------------------------------------- RGB <-> YUV / RGB */

/* Convert one frame between pixel formats with libswscale. BT.709 for video
 * (tagged so), BT.601 full range for JPEG-style YUV. */
static struct SwsContext *sws_for(int W, int H, enum AVPixelFormat from, enum AVPixelFormat to,
                                  int cs_from, int range_from, int cs_to, int range_to) {
    struct SwsContext *c =
        sws_getContext(W, H, from, W, H, to, SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT,
                       NULL, NULL, NULL);
    if (!c) return NULL;
    sws_setColorspaceDetails(c, sws_getCoefficients(cs_from), range_from,
                             sws_getCoefficients(cs_to), range_to, 0, 1 << 16, 1 << 16);
    return c;
}

/* ----------------------------------------------------------- video out */

static int drain_packets(AVCodecContext *cc, AVFormatContext *oc, AVStream *st, AVPacket *pkt) {
    for (;;) {
        int e = avcodec_receive_packet(cc, pkt);
        if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return 0;
        if (e < 0) return e;
        av_packet_rescale_ts(pkt, cc->time_base, st->time_base);
        pkt->stream_index = st->index;
        e = av_interleaved_write_frame(oc, pkt); /* takes the packet's reference */
        if (e < 0) return e;
    }
}

static bool codec_small_last(const AVCodecContext *cc) {
    return cc->codec && (cc->codec->capabilities & AV_CODEC_CAP_SMALL_LAST_FRAME);
}

/* The sound stream's encoder: MP4 AAC (FFmpeg's native encoder), WebM Opus,
 * at MEDIA_AUDIO_RATE, stereo or as many channels as the sound has. */
#define MEDIA_AUDIO_RATE 48000
static int audio_open(c3_media_format f, const c3_media_audio *a, AVFormatContext *oc,
                      AVCodecContext **acc, AVStream **ast) {
    const char *name = f == MEDIA_MP4 ? "MP4" : "WebM";
    int rc = COSMOS3_OK, fail_code = COSMOS3_EFAIL;
    const char *enc = f == MEDIA_MP4 ? "aac" : "libopus";
    const AVCodec *codec = avcodec_find_encoder_by_name(enc);
    if (!codec)
        return c3_fail(COSMOS3_EFAIL, "%s: this FFmpeg has no %s encoder for the sound", name, enc);
    if (a->channels < 1 || a->channels > 8 || a->rate < 1 || a->samples < 1 || !a->pcm)
        return c3_fail(COSMOS3_EUSAGE, "%s: the sound (%d channels, %d Hz, %lld samples) is empty",
                       name, a->channels, a->rate, (long long)a->samples);
    AVCodecContext *cc;
    AV_NEW(*ast, avformat_new_stream(oc, NULL));
    AV_NEW(*acc, avcodec_alloc_context3(codec));
    cc = *acc;
    cc->sample_fmt = codec->sample_fmts ? codec->sample_fmts[0] : AV_SAMPLE_FMT_FLTP;
    cc->sample_rate = MEDIA_AUDIO_RATE;
    av_channel_layout_default(&cc->ch_layout, a->channels);
    cc->bit_rate = f == MEDIA_MP4 ? 96000 * a->channels : 64000 * a->channels;
    cc->time_base = (AVRational){1, MEDIA_AUDIO_RATE};
    if (oc->oformat->flags & AVFMT_GLOBALHEADER) cc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AV_TRY(avcodec_open2(cc, codec, NULL));
    AV_TRY(avcodec_parameters_from_context((*ast)->codecpar, cc));
    (*ast)->time_base = cc->time_base;
done:
    return rc;
}

/* The sound cut to `seconds` (the video's length), converted by
 * libswresample to the encoder's rate and sample format, encoded and
 * muxed; then the encoder drained. */
static int audio_write(c3_media_format f, const c3_media_audio *a, double seconds,
                       AVFormatContext *oc, AVCodecContext *cc, AVStream *st, AVPacket *pkt) {
    const char *name = f == MEDIA_MP4 ? "MP4" : "WebM";
    int rc = COSMOS3_OK, fail_code = COSMOS3_EFAIL;
    SwrContext *swr = NULL;
    AVFrame *fr = NULL;
    uint8_t **conv = NULL;
    AVChannelLayout in_layout;
    av_channel_layout_default(&in_layout, a->channels);
    int64_t in_n = C3_MIN(a->samples, (int64_t)llround(seconds * a->rate));
    if (in_n > INT_MAX / 2) in_n = INT_MAX / 2;
    AV_TRY(swr_alloc_set_opts2(&swr, &cc->ch_layout, cc->sample_fmt, cc->sample_rate, &in_layout,
                               AV_SAMPLE_FMT_FLTP, a->rate, 0, NULL));
    AV_TRY(swr_init(swr));
    const uint8_t *in[8];
    for (int c = 0; c < a->channels; c++)
        in[c] = (const uint8_t *)(a->pcm + (size_t)c * a->samples);
    int cap = swr_get_out_samples(swr, (int)in_n) + 64, got = 0;
    AV_TRY(av_samples_alloc_array_and_samples(&conv, NULL, a->channels, cap, cc->sample_fmt, 0));
    AV_TRY(got = swr_convert(swr, conv, cap, in, (int)in_n));
    int more;
    uint8_t *tail[8];
    int bps = av_get_bytes_per_sample(cc->sample_fmt),
        planar = av_sample_fmt_is_planar(cc->sample_fmt);
    for (int c = 0; c < (planar ? a->channels : 1); c++)
        tail[c] = conv[c] + (size_t)got * bps * (planar ? 1 : a->channels);
    AV_TRY(more = swr_convert(swr, tail, cap - got, NULL, 0)); /* the resampler's delay */
    int total = got + more;
    int fs = cc->frame_size > 0 ? cc->frame_size : 1024;
    bool small_last = codec_small_last(cc);
    AV_NEW(fr, av_frame_alloc());
    for (int pos = 0; pos < total; pos += fs) {
        int nfr = C3_MIN(fs, total - pos), nalloc = small_last ? nfr : fs;
        av_frame_unref(fr);
        fr->format = cc->sample_fmt;
        fr->sample_rate = cc->sample_rate;
        fr->nb_samples = nalloc;
        AV_TRY(av_channel_layout_copy(&fr->ch_layout, &cc->ch_layout));
        AV_TRY(av_frame_get_buffer(fr, 0));
        if (nalloc >
            nfr) /* the last frame padded with silence where the encoder wants whole frames */
            AV_TRY(
                av_samples_set_silence(fr->extended_data, 0, nalloc, a->channels, cc->sample_fmt));
        AV_TRY(av_samples_copy(fr->extended_data, conv, 0, pos, nfr, a->channels, cc->sample_fmt));
        fr->pts = pos;
        AV_TRY(avcodec_send_frame(cc, fr));
        AV_TRY(drain_packets(cc, oc, st, pkt));
    }
    AV_TRY(avcodec_send_frame(cc, NULL));
    AV_TRY(drain_packets(cc, oc, st, pkt));
done:
    if (conv) av_freep(&conv[0]);
    av_freep(&conv);
    av_frame_free(&fr);
    swr_free(&swr);
    av_channel_layout_uninit(&in_layout);
    return rc;
}

static int encode_video(c3_media_format f, const uint8_t *rgb, int W, int H, int F, double fps,
                        const c3_media_meta *meta, const c3_media_opts *opts, uint8_t **out,
                        size_t *n) {
    FFMPEG_NEED();
    const char *name = f == MEDIA_MP4 ? "MP4" : "WebM";
    AVCodecContext *acc = NULL;
    AVStream *ast = NULL;
    const c3_media_audio *audio = opts ? opts->audio : NULL;
    int rc = COSMOS3_OK, fail_code = COSMOS3_EFAIL;
    AVFormatContext *oc = NULL;
    AVCodecContext *cc = NULL;
    AVFrame *fr = NULL;
    AVPacket *pkt = NULL;
    struct SwsContext *sws = NULL;
    AVDictionary *enc_opts = NULL, *mux_opts = NULL;
    membuf mb = {0};
    memview mv = {&mb, 0};
    if (W % 2 || H % 2)
        return c3_fail(COSMOS3_EUSAGE, "%s: %dx%d: yuv420p video needs an even width and height",
                       name, W, H);
    if (!(fps > 0))
        return c3_fail(COSMOS3_EUSAGE, "%s: the frame rate %g must be positive", name, fps);
    AV_TRY(avformat_alloc_output_context2(&oc, NULL, f == MEDIA_MP4 ? "mp4" : "webm", NULL));
    const char *enc = f == MEDIA_MP4 ? "libx264" : "libvpx-vp9";
    const AVCodec *codec = avcodec_find_encoder_by_name(enc);
    if (!codec) {
        rc = c3_fail(COSMOS3_EFAIL,
                     "%s: this FFmpeg has no %s encoder (Debian's libavcodec59 has it)", name, enc);
        goto done;
    }
    AVStream *st;
    AV_NEW(st, avformat_new_stream(oc, NULL));
    AV_NEW(cc, avcodec_alloc_context3(codec));
    AVRational rate = av_d2q(fps, 1000000);
    cc->width = W;
    cc->height = H;
    cc->pix_fmt = AV_PIX_FMT_YUV420P;
    cc->time_base = av_inv_q(rate);
    cc->framerate = rate;
    cc->color_range = AVCOL_RANGE_MPEG;
    cc->colorspace = AVCOL_SPC_BT709;
    cc->color_primaries = AVCOL_PRI_BT709;
    cc->color_trc = AVCOL_TRC_BT709;
    if (oc->oformat->flags & AVFMT_GLOBALHEADER) cc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    int crf = opts && opts->crf >= 0 ? opts->crf
              : f == MEDIA_MP4       ? MEDIA_CRF_DEFAULT
                                     : MEDIA_VP9_CRF_DEFAULT;
    char crft[16];
    snprintf(crft, sizeof crft, "%d", crf);
    AV_TRY(av_dict_set(&enc_opts, "crf", crft, 0));
    if (f == MEDIA_WEBM) {
        cc->bit_rate = 0; /* constant quality */
        AV_TRY(av_dict_set(&enc_opts, "deadline", "good", 0));
        AV_TRY(av_dict_set(&enc_opts, "cpu-used", "4", 0));
        AV_TRY(av_dict_set(&enc_opts, "row-mt", "1", 0));
    }
    AV_TRY(avcodec_open2(cc, codec, &enc_opts));
    AV_TRY(avcodec_parameters_from_context(st->codecpar, cc));
    st->time_base = cc->time_base;
    st->avg_frame_rate = rate;
    if (audio && (rc = audio_open(f, audio, oc, &acc, &ast))) goto done;
    if (meta && meta->parameters)
        AV_TRY(av_dict_set(&oc->metadata, "comment", meta->parameters, 0));
    if (meta && meta->json) AV_TRY(av_dict_set(&oc->metadata, "description", meta->json, 0));
    AV_NEW(oc->pb, mv_open(&mv, true));
    oc->flags |= AVFMT_FLAG_CUSTOM_IO;
    oc->opaque = &mb;
    oc->io_open = mem_io_open;
    oc->io_close2 = mem_io_close;
    if (f == MEDIA_MP4) AV_TRY(av_dict_set(&mux_opts, "movflags", "+faststart", 0));
    AV_TRY(avformat_write_header(oc, &mux_opts));
    AV_NEW(fr, av_frame_alloc());
    AV_NEW(pkt, av_packet_alloc());
    fr->format = AV_PIX_FMT_YUV420P;
    fr->width = W;
    fr->height = H;
    AV_TRY(av_frame_get_buffer(fr, 0));
    AV_NEW(sws,
           sws_for(W, H, AV_PIX_FMT_RGB24, AV_PIX_FMT_YUV420P, SWS_CS_ITU709, 1, SWS_CS_ITU709, 0));
    for (int i = 0; i < F; i++) {
        AV_TRY(av_frame_make_writable(fr));
        const uint8_t *src[1] = {rgb + (size_t)i * W * H * 3};
        const int stride[1] = {W * 3};
        AV_TRY(sws_scale(sws, src, stride, 0, H, fr->data, fr->linesize));
        fr->pts = i;
        AV_TRY(avcodec_send_frame(cc, fr));
        AV_TRY(drain_packets(cc, oc, st, pkt));
    }
    AV_TRY(avcodec_send_frame(cc, NULL));
    AV_TRY(drain_packets(cc, oc, st, pkt));
    if (audio && (rc = audio_write(f, audio, F / fps, oc, acc, ast, pkt))) goto done;
    AV_TRY(av_write_trailer(oc));
    avio_flush(oc->pb);
    *out = mb.data;
    *n = mb.len;
    mb.data = NULL;
done:
    sws_freeContext(sws);
    av_packet_free(&pkt);
    av_frame_free(&fr);
    avcodec_free_context(&cc);
    avcodec_free_context(&acc);
    if (oc) {
        mv_close(&oc->pb);
        avformat_free_context(oc);
    }
    av_dict_free(&enc_opts);
    av_dict_free(&mux_opts);
    free(mb.data);
    return rc;
}

/* ---------------------------------------------------------- WebP still */

static int encode_webp(const uint8_t *rgb, int W, int H, const c3_media_meta *meta,
                       const c3_media_opts *opts, uint8_t **out, size_t *n) {
    FFMPEG_NEED();
    const char *name = "WebP";
    int rc = COSMOS3_OK, fail_code = COSMOS3_EFAIL;
    AVCodecContext *cc = NULL;
    AVFrame *fr = NULL;
    AVPacket *pkt = NULL;
    struct SwsContext *sws = NULL;
    AVDictionary *eo = NULL;
    WebPMux *mux = NULL;
    WebPData assembled = {0};
    char *xmp = NULL;
    const AVCodec *codec = avcodec_find_encoder_by_name("libwebp");
    if (!codec)
        return c3_fail(COSMOS3_EFAIL,
                       "WebP: this FFmpeg has no libwebp encoder (Debian's libavcodec59 has it)");
    AV_NEW(cc, avcodec_alloc_context3(codec));
    cc->width = W;
    cc->height = H;
    cc->pix_fmt = AV_PIX_FMT_YUV420P;
    cc->time_base = (AVRational){1, 25};
    char q[16];
    snprintf(q, sizeof q, "%d", opts && opts->quality > 0 ? opts->quality : MEDIA_QUALITY_DEFAULT);
    AV_TRY(av_dict_set(&eo, "quality", q, 0));
    AV_TRY(av_dict_set(&eo, "preset", "picture", 0));
    AV_TRY(avcodec_open2(cc, codec, &eo));
    AV_NEW(fr, av_frame_alloc());
    AV_NEW(pkt, av_packet_alloc());
    fr->format = cc->pix_fmt;
    fr->width = W;
    fr->height = H;
    AV_TRY(av_frame_get_buffer(fr, 0));
    /* WebP's lossy format is BT.601 limited range (libwebp's own RGB import) */
    AV_NEW(sws,
           sws_for(W, H, AV_PIX_FMT_RGB24, AV_PIX_FMT_YUV420P, SWS_CS_ITU601, 1, SWS_CS_ITU601, 0));
    const uint8_t *src[1] = {rgb};
    const int stride[1] = {W * 3};
    AV_TRY(sws_scale(sws, src, stride, 0, H, fr->data, fr->linesize));
    fr->pts = 0;
    AV_TRY(avcodec_send_frame(cc, fr));
    AV_TRY(avcodec_send_frame(cc, NULL));
    AV_TRY(avcodec_receive_packet(cc, pkt));
    /* the packet is a whole RIFF WebP file; add the XMP chunk */
    WebPData img = {pkt->data, (size_t)pkt->size};
    mux = WebPMuxCreate(&img, 1);
    if (!mux) {
        rc = c3_fail(COSMOS3_EFAIL, "WebP: WebPMuxCreate: cannot parse the encoder's output");
        goto done;
    }
    if (meta && (meta->parameters || meta->json)) {
        xmp = xmp_packet(meta, true);
        WebPData x = {(const uint8_t *)xmp, strlen(xmp)};
        WebPMuxError me = WebPMuxSetChunk(mux, "XMP ", &x, 1);
        if (me != WEBP_MUX_OK) {
            rc = c3_fail(COSMOS3_EFAIL, "WebP: WebPMuxSetChunk(XMP): error %d", (int)me);
            goto done;
        }
    }
    WebPMuxError me = WebPMuxAssemble(mux, &assembled);
    if (me != WEBP_MUX_OK) {
        rc = c3_fail(COSMOS3_EFAIL, "WebP: WebPMuxAssemble: error %d", (int)me);
        goto done;
    }
    *out = xmalloc(assembled.size);
    memcpy(*out, assembled.bytes, assembled.size);
    *n = assembled.size;
done:
    WebPDataClear(&assembled);
    WebPMuxDelete(mux);
    free(xmp);
    sws_freeContext(sws);
    av_packet_free(&pkt);
    av_frame_free(&fr);
    avcodec_free_context(&cc);
    av_dict_free(&eo);
    return rc;
}

#else
static int encode_video(c3_media_format f, const uint8_t *rgb, int W, int H, int F, double fps,
                        const c3_media_meta *meta, const c3_media_opts *opts, uint8_t **out,
                        size_t *n) {
    (void)rgb, (void)W, (void)H, (void)F, (void)fps, (void)meta, (void)opts, (void)out, (void)n;
    return no_ffmpeg(f == MEDIA_MP4 ? "MP4" : "WebM");
}
static int encode_webp(const uint8_t *rgb, int W, int H, const c3_media_meta *meta,
                       const c3_media_opts *opts, uint8_t **out, size_t *n) {
    (void)rgb, (void)W, (void)H, (void)meta, (void)opts, (void)out, (void)n;
    return no_ffmpeg("WebP");
}
#endif

/* ---------------------------------------------------------------- JPEG */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void on_jpeg_error(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}
static void on_jpeg_message(j_common_ptr c, int level) {
    (void)c; /* warnings are not errors; the application prints nothing from here */
    (void)level;
}

static int encode_jpeg(const uint8_t *rgb, int W, int H, const c3_media_meta *meta,
                       const c3_media_opts *opts, uint8_t **out, size_t *n) {
    char *volatile xmp = NULL;
    char *volatile xmp_seg = NULL;
    if (meta && (meta->parameters || meta->json)) {
        xmp = xmp_packet(meta, true);
        if (strlen(xmp) >
            MEDIA_XMP_MAX) { /* one APP1 segment: keep the JSON, drop the copy for readers */
            free(xmp);
            xmp = xmp_packet(meta, false);
        }
        if (strlen(xmp) > MEDIA_XMP_MAX) {
            free(xmp);
            return c3_fail(
                COSMOS3_EUSAGE,
                "JPEG: the settings (%zu bytes with this prompt) do not fit JPEG metadata "
                "(64 KiB); use .png or .webp",
                strlen(meta->json ? meta->json : ""));
        }
    }
    struct jpeg_compress_struct c;
    jpeg_err err;
    unsigned char *volatile buf = NULL;
    unsigned long len = 0;
    c.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_jpeg_error;
    err.pub.emit_message = on_jpeg_message;
    if (setjmp(err.jb)) {
        jpeg_destroy_compress(&c);
        free(buf);
        free(xmp);
        free(xmp_seg);
        return c3_fail(COSMOS3_EFAIL, "JPEG encoding failed: %s", err.msg);
    }
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, (unsigned char **)&buf, &len);
    c.image_width = (JDIMENSION)W;
    c.image_height = (JDIMENSION)H;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, opts && opts->quality > 0 ? opts->quality : MEDIA_QUALITY_DEFAULT, TRUE);
    jpeg_start_compress(&c, TRUE);
    if (xmp) {
        size_t ns = sizeof xmp_ns_jpeg, xl = strlen(xmp); /* the namespace with its NUL */
        xmp_seg = xmalloc(ns + xl);
        memcpy(xmp_seg, xmp_ns_jpeg, ns);
        memcpy(xmp_seg + ns, xmp, xl);
        jpeg_write_marker(&c, JPEG_APP0 + 1, (const JOCTET *)xmp_seg, (unsigned)(ns + xl));
    }
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)c.next_scanline * W * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(xmp);
    free(xmp_seg);
    /* libjpeg's memory destination uses malloc: hand it over as is */
    *out = buf;
    *n = len;
    return COSMOS3_OK;
}

/* The XMP packet of a JPEG (its APP1 segment), via libjpeg's marker saver. */
static int jpeg_read_xmp(const uint8_t *data, size_t n, const char *name, char **parameters,
                         char **json) {
    struct jpeg_decompress_struct d;
    jpeg_err err;
    d.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_jpeg_error;
    err.pub.emit_message = on_jpeg_message;
    if (setjmp(err.jb)) {
        jpeg_destroy_decompress(&d);
        return c3_fail(COSMOS3_EINPUT, "%s: invalid JPEG: %s", name, err.msg);
    }
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, data, (unsigned long)n);
    jpeg_save_markers(&d, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&d, TRUE);
    for (jpeg_saved_marker_ptr m = d.marker_list; m; m = m->next) {
        size_t ns = sizeof xmp_ns_jpeg;
        if (m->marker == JPEG_APP0 + 1 && m->data_length > ns &&
            !memcmp(m->data, xmp_ns_jpeg, ns)) {
            xmp_read((const char *)m->data + ns, m->data_length - ns, parameters, json);
            break;
        }
    }
    jpeg_destroy_decompress(&d);
    return COSMOS3_OK;
}

/* ------------------------------------------------------------- encode */

int media_encode(c3_media_format f, const uint8_t *rgb, int W, int H, int frames, double fps,
                 const c3_media_meta *meta, const c3_media_opts *opts, uint8_t **out, size_t *n) {
    media_quiet();
    *out = NULL;
    *n = 0;
    if (W < 1 || H < 1 || W > MEDIA_MAX_SIDE || H > MEDIA_MAX_SIDE || frames < 1)
        return c3_fail(COSMOS3_EUSAGE, "%s: %d frames of %dx%d cannot be encoded",
                       media_format_name(f), frames, W, H);
    if (!media_format_is_video(f) && frames != 1)
        return c3_fail(
            COSMOS3_EUSAGE,
            "%s holds one picture, not %d frames; use .mp4, .webm, a folder or a pattern",
            media_format_name(f), frames);
    switch (f) {
    case MEDIA_MP4:
    case MEDIA_WEBM:
        return encode_video(f, rgb, W, H, frames, fps, meta, opts, out, n);
    case MEDIA_JPEG:
        return encode_jpeg(rgb, W, H, meta, opts, out, n);
    case MEDIA_WEBP:
        return encode_webp(rgb, W, H, meta, opts, out, n);
    case MEDIA_PNG: {
        c3_png_text t[2];
        int nt = 0;
        if (meta && meta->parameters)
            t[nt++] = (c3_png_text){"parameters", meta->parameters, false};
        if (meta && meta->json) t[nt++] = (c3_png_text){"cosmos3", meta->json, true};
        return png_encode_mem(rgb, W, H, t, nt, out, n);
    }
    default:
        return c3_fail(COSMOS3_EUSAGE, "unknown media format %d", (int)f);
    }
}

/* ------------------------------------------------------------- decode */

void media_frames_free(c3_media_frames *m) {
    free(m->rgb);
    memset(m, 0, sizeof *m);
}

int64_t media_cond_pixels(int W, int H) {
    int64_t px = 16 * (int64_t)(W > 0 ? W : 1) * (H > 0 ? H : 1);
    return px < 1024 * 1024 ? 1024 * 1024 : px > MEDIA_MAX_PIXELS ? MEDIA_MAX_PIXELS : px;
}

/* The frames decoded so far. keep_last: a ring of max_frames slots, the
 * oldest at slot `first`. */
typedef struct {
    uint8_t *rgb;
    size_t cap; /* bytes */
    int W, H, F;
    int first;
    int64_t decoded; /* RGB bytes decoded, kept or not */
    int ndecoded;    /* frames decoded, kept or not */
} frame_acc;

static int64_t lim_pixels(const c3_media_limits *lim) {
    return lim && lim->max_pixels > 0 ? lim->max_pixels : MEDIA_MAX_PIXELS;
}
static int lim_frames(const c3_media_limits *lim) {
    return lim && lim->max_frames > 0 ? lim->max_frames : MEDIA_MAX_FRAMES;
}

/* Refuse a picture of W x H before its pixels are decoded. */
static int check_size(const char *name, int64_t W, int64_t H, const c3_media_limits *lim) {
    int64_t maxpx = lim_pixels(lim);
    if (W < 1 || H < 1 || W > MEDIA_MAX_SIDE || H > MEDIA_MAX_SIDE || W * H > maxpx)
        return c3_fail(COSMOS3_EINPUT,
                       "%s: a %lldx%lld picture is larger than this use takes (at most %lld "
                       "pixels, %d a side); scale it down first",
                       name, (long long)W, (long long)H, (long long)maxpx, MEDIA_MAX_SIDE);
    return COSMOS3_OK;
}

static int acc_add(frame_acc *a, const char *name, const uint8_t *rgb, int W, int H,
                   const c3_media_limits *lim) {
    if (a->F == 0 && a->decoded == 0) {
        APP_TRY(check_size(name, W, H, lim));
        a->W = W;
        a->H = H;
    } else if (W != a->W || H != a->H) {
        return c3_fail(COSMOS3_EINPUT,
                       "%s: frame %d is %dx%d, the first is %dx%d; every frame must be one size",
                       name, a->F + 1, W, H, a->W, a->H);
    }
    size_t fb = (size_t)W * H * 3;
    int64_t maxb = lim && lim->max_bytes > 0 ? lim->max_bytes : MEDIA_MAX_BYTES;
    if (a->decoded + (int64_t)fb > maxb)
        return c3_fail(COSMOS3_EINPUT,
                       "%s: more than %lld MiB of %dx%d frames (%lld decoded); cut the clip to "
                       "the frames the video uses or scale it down",
                       name, (long long)(maxb >> 20), W, H, (long long)(a->decoded / (int64_t)fb));
    if (a->ndecoded >= 4 * MEDIA_MAX_FRAMES)
        return c3_fail(COSMOS3_EINPUT, "%s: more than %d frames; cut the clip first", name,
                       4 * MEDIA_MAX_FRAMES);
    a->decoded += (int64_t)fb;
    a->ndecoded++;
    int maxf = lim_frames(lim), slot = a->F;
    if (a->F == maxf) { /* keep_last and full: overwrite the oldest */
        slot = a->first;
        a->first = (a->first + 1) % maxf;
    } else {
        size_t need = fb * (size_t)(a->F + 1);
        if (need > a->cap) {
            size_t cap = C3_MIN(C3_MAX(a->cap * 2, need), fb * (size_t)maxf);
            uint8_t *p = realloc(a->rgb, cap);
            if (!p)
                return c3_fail(COSMOS3_EINPUT, "%s: out of memory for %d frames of %dx%d", name,
                               a->F + 1, W, H);
            a->rgb = p;
            a->cap = cap;
        }
        a->F++;
    }
    memcpy(a->rgb + fb * (size_t)slot, rgb, fb);
    return COSMOS3_OK;
}

/* Enough frames: stop decoding (keep_last decodes on to the end). */
static bool acc_full(const frame_acc *a, const c3_media_limits *lim) {
    return !(lim && lim->keep_last) && a->F >= lim_frames(lim);
}

static int acc_finish(frame_acc *a, const char *name, double fps, const c3_media_limits *lim,
                      c3_media_frames *out) {
    int minf = lim && lim->min_frames > 0 ? lim->min_frames : 1;
    if (a->F == 0) {
        free(a->rgb);
        return c3_fail(COSMOS3_EINPUT,
                       "%s holds no frames (an empty or unreadable picture or clip)", name);
    }
    if (a->F < minf) {
        int F = a->F;
        free(a->rgb);
        return c3_fail(COSMOS3_EINPUT, "%s has %d frame%s; at least %d are needed", name, F,
                       F == 1 ? "" : "s", minf);
    }
    if (a->first > 0) { /* the ring in time order */
        size_t fb = (size_t)a->W * a->H * 3;
        uint8_t *p = malloc(fb * (size_t)a->F);
        if (!p) {
            free(a->rgb);
            return c3_fail(COSMOS3_EINPUT, "%s: out of memory for %d frames", name, a->F);
        }
        size_t head = fb * (size_t)(a->F - a->first);
        memcpy(p, a->rgb + fb * (size_t)a->first, head);
        memcpy(p + head, a->rgb, fb * (size_t)a->first);
        free(a->rgb);
        a->rgb = p;
    }
    *out =
        (c3_media_frames){.rgb = a->rgb, .width = a->W, .height = a->H, .frames = a->F, .fps = fps};
    return COSMOS3_OK;
}

/* Animated WebP (libwebpdemux): every frame composed on the canvas. */
static int decode_webp_anim(const uint8_t *data, size_t n, const char *name,
                            const c3_media_limits *lim, c3_media_frames *out) {
    WebPAnimDecoderOptions o;
    if (!WebPAnimDecoderOptionsInit(&o))
        return c3_fail(COSMOS3_EFAIL, "%s: WebPAnimDecoderOptionsInit failed", name);
    o.color_mode = MODE_RGBA;
    o.use_threads = 0;
    /* the canvas from the VP8X chunk (24-bit sides less one) before libwebp
       allocates two RGBA canvases of it */
    if (n >= 30)
        APP_TRY(check_size(name, 1 + (data[24] | data[25] << 8 | data[26] << 16),
                           1 + (data[27] | data[28] << 8 | data[29] << 16), lim));
    WebPData wd = {data, n};
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&wd, &o);
    if (!dec) return c3_fail(COSMOS3_EINPUT, "%s: not a readable animated WebP", name);
    WebPAnimInfo info;
    frame_acc a = {0};
    int rc = COSMOS3_OK, last_ts = 0;
    uint8_t *rgb = NULL;
    if (!WebPAnimDecoderGetInfo(dec, &info)) {
        rc = c3_fail(COSMOS3_EINPUT, "%s: WebPAnimDecoderGetInfo failed", name);
        goto done;
    }
    rc = check_size(name, info.canvas_width, info.canvas_height, lim);
    if (rc) goto done;
    if (!(rgb = malloc((size_t)info.canvas_width * info.canvas_height * 3))) {
        rc = c3_fail(COSMOS3_EINPUT, "%s: out of memory for a %ux%u canvas", name,
                     info.canvas_width, info.canvas_height);
        goto done;
    }
    while (rc == COSMOS3_OK && WebPAnimDecoderHasMoreFrames(dec) && !acc_full(&a, lim)) {
        uint8_t *rgba;
        int ts;
        if (!WebPAnimDecoderGetNext(dec, &rgba, &ts)) {
            rc = c3_fail(COSMOS3_EINPUT, "%s: frame %d of the animated WebP cannot be decoded",
                         name, a.F + 1);
            break;
        }
        for (size_t i = 0; i < (size_t)info.canvas_width * info.canvas_height; i++)
            memcpy(rgb + i * 3, rgba + i * 4, 3);
        rc = acc_add(&a, name, rgb, (int)info.canvas_width, (int)info.canvas_height, lim);
        last_ts = ts;
    }
done:
    free(rgb);
    WebPAnimDecoderDelete(dec);
    if (rc) {
        free(a.rgb);
        return rc;
    }
    /* timestamps are the end times of the frames, in ms */
    double fps = a.F > 0 && last_ts > 0 ? a.F * 1000.0 / last_ts : 0;
    return acc_finish(&a, name, fps, lim, out);
}

static bool is_anim_webp(const uint8_t *d, size_t n) {
    if (n < 21 || memcmp(d, "RIFF", 4) || memcmp(d + 8, "WEBPVP8X", 8)) return false;
    return (d[20] & 0x02) != 0; /* VP8X flags: animation */
}

#if COSMOS3_HAVE_FFMPEG
/* Decode every video frame of a container (libavformat + libavcodec). */
static int decode_av(AVFormatContext *ic, const char *name, const c3_media_limits *lim,
                     c3_media_frames *out) {
    int rc = COSMOS3_OK, fail_code = COSMOS3_EINPUT;
    AVCodecContext *dc = NULL;
    AVFrame *fr = NULL;
    AVPacket *pkt = NULL;
    struct SwsContext *sws = NULL;
    uint8_t *rgb = NULL;
    frame_acc a = {0};
    double fps = 0;
    int sw = 0, sh = 0, sfmt = -1;
    int64_t maxpx = lim_pixels(lim);
    AVDictionary **sopt = NULL;
    unsigned nst = ic->nb_streams;
    /* the sizes the container states, before any frame is decoded; the
       probe's own decoders get the same bound */
    for (unsigned i = 0; i < nst; i++) {
        AVCodecParameters *cp = ic->streams[i]->codecpar;
        if (cp->codec_type == AVMEDIA_TYPE_VIDEO && cp->width > 0 && cp->height > 0 &&
            (rc = check_size(name, cp->width, cp->height, lim)))
            goto done;
    }
    if (nst > 0) {
        AV_NEW(sopt, av_calloc(nst, sizeof *sopt));
        for (unsigned i = 0; i < nst; i++)
            AV_TRY(av_dict_set_int(&sopt[i], "max_pixels", maxpx, 0));
    }
    rc = avformat_find_stream_info(ic, sopt);
    for (unsigned i = 0; i < nst; i++)
        av_dict_free(&sopt[i]);
    av_freep(&sopt);
    AV_TRY(rc);
    rc = COSMOS3_OK;
    const AVCodec *codec = NULL;
    int si = av_find_best_stream(ic, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (si < 0) {
        rc = c3_fail(COSMOS3_EINPUT, "%s holds no picture or video stream", name);
        goto done;
    }
    AVStream *st = ic->streams[si];
    if (st->codecpar->width > 0 && st->codecpar->height > 0 &&
        (rc = check_size(name, st->codecpar->width, st->codecpar->height, lim)))
        goto done;
    AV_NEW(dc, avcodec_alloc_context3(codec));
    AV_TRY(avcodec_parameters_to_context(dc, st->codecpar));
    dc->thread_count = 1;
    dc->max_pixels = maxpx; /* a frame that grows mid-stream is refused by the decoder */
    AV_TRY(avcodec_open2(dc, codec, NULL));
    AVRational r = st->avg_frame_rate.num ? st->avg_frame_rate : st->r_frame_rate;
    bool still =
        ic->iformat && (strstr(ic->iformat->name, "_pipe") || !strcmp(ic->iformat->name, "image2"));
    if (!still && r.num > 0 && r.den > 0) fps = av_q2d(r);
    AV_NEW(fr, av_frame_alloc());
    AV_NEW(pkt, av_packet_alloc());
    bool eof = false;
    while (!acc_full(&a, lim)) {
        int e = avcodec_receive_frame(dc, fr);
        if (e == AVERROR_EOF) break;
        if (e == AVERROR(EAGAIN)) {
            if (eof) break;
            e = av_read_frame(ic, pkt);
            if (e == AVERROR_EOF) {
                eof = true;
                AV_TRY(avcodec_send_packet(dc, NULL));
                continue;
            }
            AV_TRY(e);
            if (pkt->stream_index == si) {
                e = avcodec_send_packet(dc, pkt);
                av_packet_unref(pkt);
                if (e < 0 && e != AVERROR(EAGAIN) && e != AVERROR_INVALIDDATA) AV_TRY(e);
            } else {
                av_packet_unref(pkt);
            }
            continue;
        }
        AV_TRY(e);
        int W = fr->width, H = fr->height;
        if ((rc = check_size(name, W, H, lim))) goto done;
        if (!sws || W != sw || H != sh || fr->format != sfmt) {
            sws_freeContext(sws);
            bool full = fr->color_range == AVCOL_RANGE_JPEG || fr->format == AV_PIX_FMT_YUVJ420P ||
                        fr->format == AV_PIX_FMT_YUVJ422P || fr->format == AV_PIX_FMT_YUVJ444P;
            int cs = fr->colorspace == AVCOL_SPC_BT709 ? SWS_CS_ITU709 : SWS_CS_ITU601;
            AV_NEW(sws, sws_for(W, H, fr->format, AV_PIX_FMT_RGB24, cs, full, cs, 1));
            sw = W;
            sh = H;
            sfmt = fr->format;
            free(rgb);
            if (!(rgb = malloc((size_t)W * H * 3))) {
                rc = c3_fail(COSMOS3_EINPUT, "%s: out of memory for a %dx%d frame", name, W, H);
                goto done;
            }
        }
        uint8_t *dst[1] = {rgb};
        int stride[1] = {W * 3};
        AV_TRY(sws_scale(sws, (const uint8_t *const *)fr->data, fr->linesize, 0, H, dst, stride));
        av_frame_unref(fr);
        rc = acc_add(&a, name, rgb, W, H, lim);
        if (rc) goto done;
    }
done:
    if (sopt)
        for (unsigned i = 0; i < nst; i++)
            av_dict_free(&sopt[i]);
    av_freep(&sopt);
    free(rgb);
    sws_freeContext(sws);
    av_packet_free(&pkt);
    av_frame_free(&fr);
    avcodec_free_context(&dc);
    if (rc) {
        free(a.rgb);
        return rc;
    }
    return acc_finish(&a, name, fps, lim, out);
}

static int open_input_mem(const uint8_t *data, size_t n, const char *name, AVFormatContext **ic,
                          memview *mv, membuf *mb) {
    int rc = COSMOS3_OK, fail_code = COSMOS3_EINPUT;
    AVIOContext *pb = NULL; /* ours: libavformat never frees a custom pb */
    *mb = (membuf){.data = (uint8_t *)data, .len = n, .cap = n};
    *mv = (memview){mb, 0};
    AV_NEW(*ic, avformat_alloc_context());
    AV_NEW(pb, mv_open(mv, false));
    (*ic)->pb = pb;
    (*ic)->flags |= AVFMT_FLAG_CUSTOM_IO;
    AV_TRY(avformat_open_input(ic, NULL, NULL, NULL)); /* frees *ic on failure */
    return COSMOS3_OK;
done:
    avformat_free_context(*ic);
    *ic = NULL;
    mv_close(&pb);
    return rc;
}

static void close_input(AVFormatContext **ic) {
    if (!*ic) return;
    AVIOContext *pb = (*ic)->pb;
    avformat_close_input(ic);
    mv_close(&pb);
}

static int decode_av_mem(const uint8_t *data, size_t n, const char *name,
                         const c3_media_limits *lim, c3_media_frames *out) {
    FFMPEG_NEED();
    AVFormatContext *ic = NULL;
    memview mv;
    membuf mb;
    int rc = open_input_mem(data, n, name, &ic, &mv, &mb);
    if (rc)
        return c3_fail(
            COSMOS3_EINPUT,
            "%s is not a picture or clip cosmos3 can read (PNG, JPEG, WebP, MP4, WebM, MOV)", name);
    rc = decode_av(ic, name, lim, out);
    close_input(&ic);
    return rc;
}
#else
static int decode_av_mem(const uint8_t *data, size_t n, const char *name,
                         const c3_media_limits *lim, c3_media_frames *out) {
    (void)data, (void)n, (void)lim, (void)out;
    return no_ffmpeg(name);
}
#endif

int media_decode_mem(const uint8_t *data, size_t n, const char *name, const c3_media_limits *lim,
                     c3_media_frames *out) {
    media_quiet();
    memset(out, 0, sizeof *out);
    if (n == 0) return c3_fail(COSMOS3_EINPUT, "%s is empty (0 bytes)", name);
    if (is_anim_webp(data, n)) return decode_webp_anim(data, n, name, lim, out);
    if (n >= 8 && !memcmp(data, "\x89PNG\r\n\x1a\n", 8)) { /* libpng: the settings' own format */
        frame_acc a = {0};
        uint8_t *rgb;
        int W, H;
        APP_TRY(png_read_rgb_mem_max(data, n, name, lim_pixels(lim), &rgb, &W, &H));
        int rc = acc_add(&a, name, rgb, W, H, lim);
        free(rgb);
        if (rc) return rc;
        return acc_finish(&a, name, 0, lim, out);
    }
    return decode_av_mem(data, n, name, lim, out);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* PNG frames from a sorted list of paths. */
static int decode_png_list(char **paths, size_t np, const char *name, const c3_media_limits *lim,
                           c3_media_frames *out) {
    frame_acc a = {0};
    int rc = COSMOS3_OK;
    double fps = 0;
    for (size_t i = 0; i < np && rc == COSMOS3_OK && !acc_full(&a, lim); i++) {
        uint8_t *rgb;
        int W, H;
        rc = png_read_rgb_max(paths[i], lim_pixels(lim), &rgb, &W, &H);
        if (rc == COSMOS3_OK) {
            rc = acc_add(&a, name, rgb, W, H, lim);
            free(rgb);
        }
        if (rc == COSMOS3_OK && i == 0) { /* the fps cosmos3 wrote with the frames */
            char *p = NULL, *js = NULL;
            if (media_read_meta(paths[0], &p, &js) == COSMOS3_OK && js) {
                json_t *o = json_loads(js, 0, NULL);
                json_t *v = json_object_get(json_object_get(o, "settings"), "fps");
                if (json_is_number(v)) fps = json_number_value(v);
                json_decref(o);
            }
            free(p);
            free(js);
        }
    }
    if (rc) {
        free(a.rgb);
        return rc;
    }
    return acc_finish(&a, name, fps, lim, out);
}

/* The PNG files of a folder (or matching a glob), in name order. */
static int list_frames(const char *path, bool is_dir, char ***out, size_t *np) {
    *out = NULL;
    *np = 0;
    glob_t g;
    char *pat = is_dir ? c3_path_join(path, "*.[pP][nN][gG]") : xstrdup(path);
    int e = glob(pat, 0, NULL, &g);
    free(pat);
    if (e == GLOB_NOMATCH) return COSMOS3_OK;
    if (e != 0)
        return c3_fail(COSMOS3_EINPUT, "%s: cannot list the frames (glob error %d)", path, e);
    if (g.gl_pathc > MEDIA_MAX_GLOB) {
        globfree(&g);
        return c3_fail(COSMOS3_EINPUT, "%s: more than %d files", path, MEDIA_MAX_GLOB);
    }
    char **v = xcalloc(g.gl_pathc + 1, sizeof *v);
    for (size_t i = 0; i < g.gl_pathc; i++)
        v[i] = xstrdup(g.gl_pathv[i]);
    qsort(v, g.gl_pathc, sizeof *v, cmp_str);
    *np = g.gl_pathc;
    *out = v;
    globfree(&g);
    return COSMOS3_OK;
}

static void free_list(char **v, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static bool has_glob(const char *p) {
    return strpbrk(p, "*?[") != NULL;
}

int media_decode(const char *path, const c3_media_limits *lim, c3_media_frames *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if ((exists && S_ISDIR(st.st_mode)) || (!exists && has_glob(path))) {
        char **v;
        size_t np;
        APP_TRY(list_frames(path, exists, &v, &np));
        if (np == 0) {
            free_list(v, np);
            return c3_fail(COSMOS3_EINPUT, "%s: no PNG frames %s", path,
                           exists ? "in this folder" : "match");
        }
        int rc = decode_png_list(v, np, path, lim, out);
        free_list(v, np);
        return rc;
    }
    if (!exists) return c3_fail(COSMOS3_EINPUT, "cannot read %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return c3_fail(COSMOS3_EINPUT, "%s is not a regular file", path);
    if (st.st_size > MEDIA_MAX_BYTES) /* read whole into memory below */
        return c3_fail(COSMOS3_EINPUT, "%s is %lld MiB; at most %lld MiB are read; cut it first",
                       path, (long long)(st.st_size >> 20), MEDIA_MAX_BYTES >> 20);
    char *data;
    size_t n;
    APP_TRY(c3_read_file(path, &data, &n));
    int rc = media_decode_mem((const uint8_t *)data, n, path, lim, out);
    free(data);
    return rc;
}

/* --------------------------------------------------------------- probe */

#if COSMOS3_HAVE_FFMPEG
static int probe_av(const uint8_t *data, size_t n, const char *path, c3_media_info *info) {
    FFMPEG_NEED();
    int rc = COSMOS3_OK, fail_code = COSMOS3_EINPUT;
    const char *name = path;
    AVFormatContext *ic = NULL;
    memview mv;
    membuf mb;
    rc = open_input_mem(data, n, path, &ic, &mv, &mb);
    if (rc) {
        rc = c3_fail(
            COSMOS3_EINPUT,
            "%s is not a picture or clip cosmos3 can read (PNG, JPEG, WebP, MP4, WebM, MOV)", path);
        goto done;
    }
    AV_TRY(avformat_find_stream_info(ic, NULL));
    int si = av_find_best_stream(ic, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (si < 0) {
        rc = c3_fail(COSMOS3_EINPUT, "%s holds no picture or video stream", path);
        goto done;
    }
    AVStream *s = ic->streams[si];
    const char *fmt = ic->iformat->name;
    snprintf(info->container, sizeof info->container, "%s",
             !strcmp(fmt, "png_pipe")        ? "png"
             : !strcmp(fmt, "jpeg_pipe")     ? "jpeg"
             : !strcmp(fmt, "webp_pipe")     ? "webp"
             : !strcmp(fmt, "matroska,webm") ? (strstr(path, ".mkv") ? "matroska" : "webm")
             : strstr(fmt, "mp4")            ? "mp4"
                                             : fmt);
    snprintf(info->codec, sizeof info->codec, "%s", avcodec_get_name(s->codecpar->codec_id));
    const char *pf = av_get_pix_fmt_name((enum AVPixelFormat)s->codecpar->format);
    snprintf(info->pix_fmt, sizeof info->pix_fmt, "%s", pf ? pf : "");
    info->width = s->codecpar->width;
    info->height = s->codecpar->height;
    int ai = av_find_best_stream(ic, AVMEDIA_TYPE_AUDIO, -1, -1, NULL, 0);
    if (ai >= 0) { /* the sound beside the video */
        AVStream *as = ic->streams[ai];
        snprintf(info->audio_codec, sizeof info->audio_codec, "%s",
                 avcodec_get_name(as->codecpar->codec_id));
        info->audio_rate = as->codecpar->sample_rate;
        info->audio_channels = as->codecpar->ch_layout.nb_channels;
        if (as->duration > 0) info->audio_seconds = (double)as->duration * av_q2d(as->time_base);
    }
    bool still = strstr(fmt, "_pipe") != NULL;
    AVRational r = s->avg_frame_rate.num ? s->avg_frame_rate : s->r_frame_rate;
    if (!still && r.num > 0 && r.den > 0) info->fps = av_q2d(r);
    if (still) {
        info->frames = 1;
    } else {
        /* count the packets of the stream (one frame each for these codecs) */
        AVPacket *pkt;
        AV_NEW(pkt, av_packet_alloc());
        int e;
        while ((e = av_read_frame(ic, pkt)) >= 0) {
            if (pkt->stream_index == si) info->frames++;
            av_packet_unref(pkt);
        }
        av_packet_free(&pkt);
        if (e != AVERROR_EOF) AV_TRY(e);
        info->seconds = ic->duration > 0 ? (double)ic->duration / AV_TIME_BASE : 0;
    }
done:
    close_input(&ic);
    return rc;
}
#else
static int probe_av(const uint8_t *data, size_t n, const char *path, c3_media_info *info) {
    (void)data, (void)n, (void)info;
    return no_ffmpeg(path);
}
#endif

/* A PNG's info from its IHDR chunk, as FFmpeg's probe names it, without
 * loading FFmpeg (cosmos3 info FILE on its own pictures starts at once):
 * false for what it does not name the same way (bit depths below 8, a
 * palette of other than 8 bits), which probe_av reads. */
static bool probe_png(const uint8_t *d, size_t n, c3_media_info *info) {
    /* signature, IHDR's length and type, width, height, depth, colour type */
    if (n < 33 || memcmp(d, "\x89PNG\r\n\x1a\n", 8) || memcmp(d + 12, "IHDR", 4)) return false;
    uint32_t W = (uint32_t)d[16] << 24 | (uint32_t)d[17] << 16 | (uint32_t)d[18] << 8 | d[19];
    uint32_t H = (uint32_t)d[20] << 24 | (uint32_t)d[21] << 16 | (uint32_t)d[22] << 8 | d[23];
    int depth = d[24], type = d[25];
    static const struct {
        int type, depth;
        const char *pix_fmt;
    } fmts[] = {{0, 8, "gray"},     {0, 16, "gray16be"}, {2, 8, "rgb24"},
                {2, 16, "rgb48be"}, {3, 8, "pal8"},      {4, 8, "ya8"},
                {4, 16, "ya16be"},  {6, 8, "rgba"},      {6, 16, "rgba64be"}};
    const char *pf = NULL;
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++)
        if (fmts[i].type == type && fmts[i].depth == depth) pf = fmts[i].pix_fmt;
    if (!pf || W < 1 || H < 1 || W > INT32_MAX || H > INT32_MAX) return false;
    snprintf(info->container, sizeof info->container, "png");
    snprintf(info->codec, sizeof info->codec, "png");
    snprintf(info->pix_fmt, sizeof info->pix_fmt, "%s", pf);
    info->width = (int)W;
    info->height = (int)H;
    info->frames = 1;
    return true;
}

/* info from decoded frames (a folder, an animated WebP), which it frees */
static void info_from_frames(c3_media_info *info, c3_media_frames *m, const char *container,
                             const char *codec) {
    snprintf(info->container, sizeof info->container, "%s", container);
    snprintf(info->codec, sizeof info->codec, "%s", codec);
    info->width = m->width;
    info->height = m->height;
    info->frames = m->frames;
    info->fps = m->fps;
    info->seconds = m->fps > 0 ? m->frames / m->fps : 0;
    media_frames_free(m);
}

int media_probe(const char *path, c3_media_info *info) {
    media_quiet();
    memset(info, 0, sizeof *info);
    struct stat st;
    if (stat(path, &st) != 0)
        return c3_fail(COSMOS3_EINPUT, "cannot read %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        c3_media_frames m;
        APP_TRY(media_decode(path, NULL, &m));
        info_from_frames(info, &m, "folder", "png");
        return COSMOS3_OK;
    }
    char *data;
    size_t n;
    APP_TRY(c3_read_file(path, &data, &n));
    info->bytes = (int64_t)n;
    int rc = COSMOS3_OK;
    if (is_anim_webp((const uint8_t *)data, n)) {
        c3_media_frames m;
        rc = decode_webp_anim((const uint8_t *)data, n, path, NULL, &m);
        if (rc == COSMOS3_OK) info_from_frames(info, &m, "webp", "webp (animated)");
        goto done;
    }
    if (!probe_png((const uint8_t *)data, n, info))
        rc = probe_av((const uint8_t *)data, n, path, info);
done:
    free(data);
    return rc;
}

/* ------------------------------------------------------------ metadata */

/* Containers: the comment / description tags. */
#if COSMOS3_HAVE_FFMPEG
static int meta_av(const uint8_t *data, size_t n, const char *name, char **parameters,
                   char **json) {
    FFMPEG_NEED();
    AVFormatContext *ic = NULL;
    memview mv;
    membuf mb;
    if (open_input_mem(data, n, name, &ic, &mv, &mb) != COSMOS3_OK)
        return c3_fail(
            COSMOS3_EINPUT,
            "%s is not a picture or clip cosmos3 can read (PNG, JPEG, WebP, MP4, WebM, MOV)", name);
    const AVDictionaryEntry *c = av_dict_get(ic->metadata, "comment", NULL, 0);
    const AVDictionaryEntry *d = av_dict_get(ic->metadata, "description", NULL, 0);
    if (c) *parameters = xstrdup(c->value);
    if (d) *json = xstrdup(d->value);
    close_input(&ic);
    return COSMOS3_OK;
}
#else
static int meta_av(const uint8_t *data, size_t n, const char *name, char **parameters,
                   char **json) {
    (void)data, (void)n, (void)parameters, (void)json;
    return no_ffmpeg(name);
}
#endif

int media_read_meta_mem(const uint8_t *data, size_t n, const char *name, char **parameters,
                        char **json) {
    media_quiet();
    *parameters = *json = NULL;
    if (n >= 8 && !memcmp(data, "\x89PNG\r\n\x1a\n", 8)) {
        char **keys, **vals;
        int nk;
        APP_TRY(png_read_texts_mem(data, n, name, &keys, &vals, &nk));
        for (int i = 0; i < nk; i++) {
            if (!strcmp(keys[i], "parameters") && !*parameters) *parameters = xstrdup(vals[i]);
            if (!strcmp(keys[i], "cosmos3") && !*json) *json = xstrdup(vals[i]);
            free(keys[i]);
            free(vals[i]);
        }
        free(keys);
        free(vals);
        return COSMOS3_OK;
    }
    if (n >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
        return jpeg_read_xmp(data, n, name, parameters, json);
    if (n >= 12 && !memcmp(data, "RIFF", 4) && !memcmp(data + 8, "WEBP", 4)) {
        WebPData wd = {data, n};
        WebPMux *mux = WebPMuxCreate(&wd, 0);
        if (!mux) return c3_fail(COSMOS3_EINPUT, "%s: not a readable WebP file", name);
        WebPData x;
        if (WebPMuxGetChunk(mux, "XMP ", &x) == WEBP_MUX_OK)
            xmp_read((const char *)x.bytes, x.size, parameters, json);
        WebPMuxDelete(mux);
        return COSMOS3_OK;
    }
    return meta_av(data, n, name, parameters, json);
}

int media_read_meta(const char *path, char **parameters, char **json) {
    *parameters = *json = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return c3_fail(COSMOS3_EINPUT, "cannot read %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) { /* a frame folder: its first frame */
        char **v;
        size_t np;
        APP_TRY(list_frames(path, true, &v, &np));
        int rc = np ? media_read_meta(v[0], parameters, json)
                    : c3_fail(COSMOS3_EINPUT, "%s: no PNG frames in this folder", path);
        free_list(v, np);
        return rc;
    }
    char *data;
    size_t n;
    APP_TRY(c3_read_file(path, &data, &n));
    int rc = n ? media_read_meta_mem((const uint8_t *)data, n, path, parameters, json)
               : c3_fail(COSMOS3_EINPUT, "%s is empty (0 bytes)", path);
    free(data);
    return rc;
}

/* --------------------------------------------------------------- misc */

void media_strip(const uint8_t *rgb, int W, int H, int frames, uint8_t **out, int *outW) {
    int pick[3] = {0, frames / 2, frames - 1}, np = frames >= 3 ? 3 : frames >= 2 ? 2 : 1;
    if (np == 2) pick[1] = frames - 1;
    int gap = np > 1 ? C3_MAX(2, W / 32) : 0;
    int SW = np * W + (np - 1) * gap;
    uint8_t *s = xcalloc((size_t)SW * H * 3, 1);
    for (int k = 0; k < np; k++) {
        const uint8_t *f = rgb + (size_t)pick[k] * W * H * 3;
        for (int y = 0; y < H; y++)
            memcpy(s + ((size_t)y * SW + (size_t)k * (W + gap)) * 3, f + (size_t)y * W * 3,
                   (size_t)W * 3);
    }
    *out = s;
    *outW = SW;
}

double media_psnr(const uint8_t *a, const uint8_t *b, size_t n) {
    double se = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
    }
    if (se == 0) return INFINITY;
    return 10.0 * log10(255.0 * 255.0 / (se / (double)n));
}
