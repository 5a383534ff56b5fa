#!/usr/bin/env python3
"""bombs.py - small files that claim huge pictures, for the hardening tests
(test_harden2.sh, test_serve_harden.sh), written into the current folder. A
refusal reads the header; the pixels need not be valid.

  bomb16k.png   16384^2, 64 rows of data      bomb30k.png  30000^2, 16 rows
  ok64.png      64^2, whole                   wide.png     8192x4096 (32 M pixels: above 4096^2)
  anim16k.webp  an animated WebP canvas of 16384^2, one 2x2 frame (its bitstream
  anim60k.webp  60000^2                        is not needed: the canvas is refused first)
"""
import struct
import zlib


def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)


def png(path, w, h, rows):
    raw = b''.join(b'\0' + bytes(w * 3) for _ in range(rows))
    open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
                           + chunk(b'IDAT', zlib.compress(raw, 9)) + chunk(b'IEND', b''))


def webp_anim(path, w, h):
    vp8x = struct.pack('<B3x', 0x12) + (w - 1).to_bytes(3, 'little') + (h - 1).to_bytes(3, 'little')
    anim = struct.pack('<IH', 0, 0)
    anmf = (bytes(6) + (1).to_bytes(3, 'little') + (1).to_bytes(3, 'little') + bytes(4) + b'VP8L'
            + struct.pack('<I', 6) + bytes(6))
    body = (b'WEBP' + b'VP8X' + struct.pack('<I', 10) + vp8x + b'ANIM' + struct.pack('<I', 6) + anim
            + b'ANMF' + struct.pack('<I', len(anmf)) + anmf)
    open(path, 'wb').write(b'RIFF' + struct.pack('<I', len(body)) + body)


png('bomb16k.png', 16384, 16384, 64)
png('bomb30k.png', 30000, 30000, 16)
png('ok64.png', 64, 64, 64)
png('wide.png', 8192, 4096, 4)
webp_anim('anim16k.webp', 16384, 16384)
webp_anim('anim60k.webp', 60000, 60000)
