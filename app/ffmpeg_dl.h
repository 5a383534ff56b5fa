/* ffmpeg_dl.h - FFmpeg's libraries loaded on first use (dlopen), not at
 * start: their 100-odd dependent libraries cost some 70 ms and 20 MB at
 * every start, even of `cosmos3 --version` (issue 36). Include it after the
 * FFmpeg headers in the one file that calls FFmpeg (media.c): each function
 * that file calls becomes a call through c3_ff, which ffmpeg_load() fills;
 * every FFmpeg path calls ffmpeg_load() first. A function added to media.c
 * is added to both lists below (the link fails until it is). */
#ifndef COSMOS3_FFMPEG_DL_H
#define COSMOS3_FFMPEG_DL_H

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>

/* X(name): every FFmpeg function media.c calls */
#define C3_FFMPEG_FUNCTIONS(X)                                                                     \
    X(av_calloc)                                                                                   \
    X(av_channel_layout_copy)                                                                      \
    X(av_channel_layout_default)                                                                   \
    X(av_channel_layout_uninit)                                                                    \
    X(av_d2q)                                                                                      \
    X(av_dict_free)                                                                                \
    X(av_dict_get)                                                                                 \
    X(av_dict_set)                                                                                 \
    X(av_dict_set_int)                                                                             \
    X(av_find_best_stream)                                                                         \
    X(av_frame_alloc)                                                                              \
    X(av_frame_free)                                                                               \
    X(av_frame_get_buffer)                                                                         \
    X(av_frame_make_writable)                                                                      \
    X(av_frame_unref)                                                                              \
    X(av_free)                                                                                     \
    X(av_freep)                                                                                    \
    X(av_get_bytes_per_sample)                                                                     \
    X(av_get_pix_fmt_name)                                                                         \
    X(av_interleaved_write_frame)                                                                  \
    X(av_log_set_level)                                                                            \
    X(av_malloc)                                                                                   \
    X(av_mallocz)                                                                                  \
    X(av_packet_alloc)                                                                             \
    X(av_packet_free)                                                                              \
    X(av_packet_rescale_ts)                                                                        \
    X(av_packet_unref)                                                                             \
    X(av_read_frame)                                                                               \
    X(av_sample_fmt_is_planar)                                                                     \
    X(av_samples_alloc_array_and_samples)                                                          \
    X(av_samples_copy)                                                                             \
    X(av_samples_set_silence)                                                                      \
    X(av_strerror)                                                                                 \
    X(av_write_trailer)                                                                            \
    X(avcodec_alloc_context3)                                                                      \
    X(avcodec_find_encoder_by_name)                                                                \
    X(avcodec_free_context)                                                                        \
    X(avcodec_get_name)                                                                            \
    X(avcodec_open2)                                                                               \
    X(avcodec_parameters_from_context)                                                             \
    X(avcodec_parameters_to_context)                                                               \
    X(avcodec_receive_frame)                                                                       \
    X(avcodec_receive_packet)                                                                      \
    X(avcodec_send_frame)                                                                          \
    X(avcodec_send_packet)                                                                         \
    X(avformat_alloc_context)                                                                      \
    X(avformat_alloc_output_context2)                                                              \
    X(avformat_close_input)                                                                        \
    X(avformat_find_stream_info)                                                                   \
    X(avformat_free_context)                                                                       \
    X(avformat_new_stream)                                                                         \
    X(avformat_open_input)                                                                         \
    X(avformat_write_header)                                                                       \
    X(avio_alloc_context)                                                                          \
    X(avio_context_free)                                                                           \
    X(avio_flush)                                                                                  \
    X(swr_alloc_set_opts2)                                                                         \
    X(swr_convert)                                                                                 \
    X(swr_free)                                                                                    \
    X(swr_get_out_samples)                                                                         \
    X(swr_init)                                                                                    \
    X(sws_freeContext)                                                                             \
    X(sws_getCoefficients)                                                                         \
    X(sws_getContext)                                                                              \
    X(sws_scale)                                                                                   \
    X(sws_setColorspaceDetails)                                                                    \
    /* end */

typedef struct {
#define C3_FF_MEMBER(name) __typeof__(name) *name;
    C3_FFMPEG_FUNCTIONS(C3_FF_MEMBER)
#undef C3_FF_MEMBER
} c3_ffmpeg;

extern c3_ffmpeg c3_ff;

/* Load FFmpeg's libraries and their functions once (thread-safe):
 * COSMOS3_OK, or COSMOS3_EUSAGE with a one-line message naming what failed
 * and the packages that hold the libraries. */
int ffmpeg_load(void);
/* In a function returning a status: ffmpeg_load(), its failure returned. */
#define FFMPEG_NEED()                                                                              \
    do {                                                                                           \
        int ffmpeg_rc_ = ffmpeg_load();                                                            \
        if (ffmpeg_rc_) return ffmpeg_rc_;                                                         \
    } while (0)

/* the calls, through the table (not in ffmpeg_dl.c, which fills it) */
#ifndef C3_FFMPEG_DL_IMPL
#define av_calloc (*c3_ff.av_calloc)
#define av_channel_layout_copy (*c3_ff.av_channel_layout_copy)
#define av_channel_layout_default (*c3_ff.av_channel_layout_default)
#define av_channel_layout_uninit (*c3_ff.av_channel_layout_uninit)
#define av_d2q (*c3_ff.av_d2q)
#define av_dict_free (*c3_ff.av_dict_free)
#define av_dict_get (*c3_ff.av_dict_get)
#define av_dict_set (*c3_ff.av_dict_set)
#define av_dict_set_int (*c3_ff.av_dict_set_int)
#define av_find_best_stream (*c3_ff.av_find_best_stream)
#define av_frame_alloc (*c3_ff.av_frame_alloc)
#define av_frame_free (*c3_ff.av_frame_free)
#define av_frame_get_buffer (*c3_ff.av_frame_get_buffer)
#define av_frame_make_writable (*c3_ff.av_frame_make_writable)
#define av_frame_unref (*c3_ff.av_frame_unref)
#define av_free (*c3_ff.av_free)
#define av_freep (*c3_ff.av_freep)
#define av_get_bytes_per_sample (*c3_ff.av_get_bytes_per_sample)
#define av_get_pix_fmt_name (*c3_ff.av_get_pix_fmt_name)
#define av_interleaved_write_frame (*c3_ff.av_interleaved_write_frame)
#define av_log_set_level (*c3_ff.av_log_set_level)
#define av_malloc (*c3_ff.av_malloc)
#define av_mallocz (*c3_ff.av_mallocz)
#define av_packet_alloc (*c3_ff.av_packet_alloc)
#define av_packet_free (*c3_ff.av_packet_free)
#define av_packet_rescale_ts (*c3_ff.av_packet_rescale_ts)
#define av_packet_unref (*c3_ff.av_packet_unref)
#define av_read_frame (*c3_ff.av_read_frame)
#define av_sample_fmt_is_planar (*c3_ff.av_sample_fmt_is_planar)
#define av_samples_alloc_array_and_samples (*c3_ff.av_samples_alloc_array_and_samples)
#define av_samples_copy (*c3_ff.av_samples_copy)
#define av_samples_set_silence (*c3_ff.av_samples_set_silence)
#define av_strerror (*c3_ff.av_strerror)
#define av_write_trailer (*c3_ff.av_write_trailer)
#define avcodec_alloc_context3 (*c3_ff.avcodec_alloc_context3)
#define avcodec_find_encoder_by_name (*c3_ff.avcodec_find_encoder_by_name)
#define avcodec_free_context (*c3_ff.avcodec_free_context)
#define avcodec_get_name (*c3_ff.avcodec_get_name)
#define avcodec_open2 (*c3_ff.avcodec_open2)
#define avcodec_parameters_from_context (*c3_ff.avcodec_parameters_from_context)
#define avcodec_parameters_to_context (*c3_ff.avcodec_parameters_to_context)
#define avcodec_receive_frame (*c3_ff.avcodec_receive_frame)
#define avcodec_receive_packet (*c3_ff.avcodec_receive_packet)
#define avcodec_send_frame (*c3_ff.avcodec_send_frame)
#define avcodec_send_packet (*c3_ff.avcodec_send_packet)
#define avformat_alloc_context (*c3_ff.avformat_alloc_context)
#define avformat_alloc_output_context2 (*c3_ff.avformat_alloc_output_context2)
#define avformat_close_input (*c3_ff.avformat_close_input)
#define avformat_find_stream_info (*c3_ff.avformat_find_stream_info)
#define avformat_free_context (*c3_ff.avformat_free_context)
#define avformat_new_stream (*c3_ff.avformat_new_stream)
#define avformat_open_input (*c3_ff.avformat_open_input)
#define avformat_write_header (*c3_ff.avformat_write_header)
#define avio_alloc_context (*c3_ff.avio_alloc_context)
#define avio_context_free (*c3_ff.avio_context_free)
#define avio_flush (*c3_ff.avio_flush)
#define swr_alloc_set_opts2 (*c3_ff.swr_alloc_set_opts2)
#define swr_convert (*c3_ff.swr_convert)
#define swr_free (*c3_ff.swr_free)
#define swr_get_out_samples (*c3_ff.swr_get_out_samples)
#define swr_init (*c3_ff.swr_init)
#define sws_freeContext (*c3_ff.sws_freeContext)
#define sws_getCoefficients (*c3_ff.sws_getCoefficients)
#define sws_getContext (*c3_ff.sws_getContext)
#define sws_scale (*c3_ff.sws_scale)
#define sws_setColorspaceDetails (*c3_ff.sws_setColorspaceDetails)
#endif

#endif
