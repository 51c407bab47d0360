"""The sandbox's video over real HTTP: HLS (TS, fMP4, AES-128, byte ranges), DASH (SegmentTemplate,
SegmentTimeline, SegmentBase with sidx), Bilibili playurl/view, progressive MP4, and the fragment fault knobs.

Manifests are parsed with the crawler's own parsers (:mod:`mediacrawler.media.manifests`) and the fragments are
assembled and verified with :mod:`mediacrawler.media.assemble`, so these tests also prove the sandbox speaks what
the client understands. Expectations come from the pure catalog (:mod:`mediacrawler_sandbox.video`).
"""

from __future__ import annotations

import hashlib
import json
import struct
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.media import manifests as mf
from mediacrawler.media.assemble import decrypt_aes128, remux_to_mp4, verify_mp4
from mediacrawler.media.renditions import manifest_from_renditions
from mediacrawler.parsers import bilibili as parser
from mediacrawler.parsers._common import PlatformError
from mediacrawler_sandbox import bilibili, video
from mediacrawler_sandbox.process import SandboxProcess

VID = bilibili.BVIDS[0]  # a bvid is a video id too: one encode serves every test
REFERER = {"Referer": "https://www.bilibili.com/video/" + VID}
HEIGHTS = [360, 480, 720]


@pytest.fixture(scope="module")
def catalog() -> video.VideoCatalog:
    return video.video_catalog(VID)


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    """(status, headers, body) without raising on 4xx/5xx."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def get(url: str, headers: dict[str, str] | None = None, byte_range: mf.ByteRange | None = None) -> bytes:
    headers = dict(headers or {})
    if byte_range is not None:
        headers["Range"] = byte_range.header()
    status, _, body = fetch(url, headers)
    assert status == (206 if byte_range is not None else 200), (url, status)
    return body


def save(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


def fetch_track(tmp: Path, tag: str, fetch_: mf.Fetch, headers: dict[str, str] | None = None,
                key_cache: dict[str, bytes] | None = None) -> tuple[Path | None, list[Path]]:
    """Download one track as the pipeline would: (init path or None, fragment paths in order)."""
    if isinstance(fetch_, mf.SingleFile):
        return None, [save(tmp, f"{tag}-full", get(fetch_.urls[0], headers))]
    assert isinstance(fetch_, mf.SegmentedFetch)
    init = None
    if fetch_.init is not None:
        init = save(tmp, f"{tag}-init", get(fetch_.init.url, headers, fetch_.init.byte_range))
    keys = key_cache if key_cache is not None else {}
    parts = []
    for seg in fetch_.segments():
        data = get(seg.url, headers, seg.byte_range)
        if seg.key is not None:
            if seg.key.url not in keys:
                keys[seg.key.url] = get(seg.key.url)
            data = decrypt_aes128(data, key=keys[seg.key.url], iv=seg.key.iv)
        parts.append(save(tmp, f"{tag}-{seg.index:03d}", data))
    assert len(parts) == fetch_.count
    return init, parts


def assemble(tmp: Path, tag: str, video_track: tuple[Path | None, list[Path]],
             audio_track: tuple[Path | None, list[Path]] | None, expected_duration: float | None) -> Any:
    out = remux_to_mp4(video_track[1], audio_track[1] if audio_track else None, tmp / f"{tag}.mp4",
                       init_video=video_track[0], init_audio=audio_track[0] if audio_track else None)
    return verify_mp4(out, expect_audio=True, expected_duration=expected_duration, max_gap=0.2)


def hls_rendition(master_url: str, height: int) -> tuple[mf.Manifest, mf.Rendition, mf.Manifest]:
    """(master manifest, the rendition of ``height`` with its media playlist's segments, the media manifest)."""
    master = mf.parse_hls(get(master_url).decode(), base_url=master_url)
    chosen = mf.select(master, max_height=height)
    assert chosen.video.height == height
    assert isinstance(chosen.video.fetch, mf.PlaylistRef)
    media = mf.parse_hls_media(get(chosen.video.fetch.url).decode(), base_url=chosen.video.fetch.url)
    return master, mf.with_fetch(chosen.video, media), media


def listed(playurl: Any) -> mf.Manifest:
    """A playurl answer as the media path gets it: the parser's renditions (and duration) → a manifest."""
    return manifest_from_renditions(parser.parse_playurl(playurl), duration=parser.playurl_duration(playurl))


def fragment_log(sb: SandboxProcess, suffix: str) -> list[dict[str, Any]]:
    return [r for r in sb.requests() if r["path"].endswith(suffix)]


# ------------------------------------------------------------------------------------------------ catalog


def test_catalog_and_urls(catalog: video.VideoCatalog) -> None:
    assert [r.height for r in catalog.video] == HEIGHTS
    assert [r.width for r in catalog.video] == [640, 854, 1280]
    assert catalog.duration == 4.0 and catalog.segment_count == 4 and catalog.segment_seconds == 1.0
    assert all(r.codecs.startswith("avc1.") and r.frames == 100 for r in catalog.video)
    assert [r.bandwidth for r in catalog.video] == sorted(r.bandwidth for r in catalog.video)
    assert catalog.audio.codecs == "mp4a.40.2" and catalog.audio.bandwidth > 0
    urls = video.video_urls("http://127.0.0.1:1", VID)
    assert set(urls) >= {"hls", "hls_fmp4", "hls_aes", "dash", "dash_timeline", "dash_segmentbase",
                         "bilibili_playurl", "progressive"}
    assert set(urls["progressive"]) == {"360p", "480p", "720p"}
    # Files are pure functions of the path (the tests below compare them with what the server sends); ids differ
    # in colours and pitch, so their bytes differ (checked on the cheap audio track).
    assert video.video_file(["dash", VID, "720p", "seg1.m4s"]) != video.video_file(["dash", VID, "720p", "seg2.m4s"])
    assert video._encode_audio("a") != video._encode_audio("b")
    assert video.video_file(["dash", "nope/../x", "m.mpd"]) is None
    assert video.video_file(["hls", VID, "900p", "index.m3u8"]) is None


# ---------------------------------------------------------------------------------------------------- HLS


def test_hls_ts_master_and_segments(fresh_sandbox: SandboxProcess, catalog: video.VideoCatalog,
                                    tmp_path: Path) -> None:
    urls = video.video_urls(fresh_sandbox.url, VID)
    status, headers, _ = fetch(urls["hls"])
    assert status == 200 and headers["Content-Type"] == "application/vnd.apple.mpegurl"
    master, rendition, media = hls_rendition(urls["hls"], 480)
    assert [(r.height, r.width, r.bandwidth) for r in master.video] == [
        (c.height, c.width, c.hls_bandwidth) for c in catalog.video]
    assert all(r.codecs == f"{c.codecs},mp4a.40.2" and r.frame_rate == 25.0 and r.has_audio
               for r, c in zip(master.video, catalog.video, strict=True))
    assert rendition.container == "ts" and media.duration == pytest.approx(4.0)
    track = fetch_track(tmp_path, "ts", rendition.fetch)
    info = assemble(tmp_path, "ts", track, None, media.duration)
    assert (info.height, info.width, info.video_codec, info.audio_codec) == (480, 854, "h264", "aac")
    log = fragment_log(fresh_sandbox, ".ts")
    assert [r["path"] for r in log] == [f"/media/hls/{VID}/480p/seg{n}.ts" for n in range(4)]
    assert all(r["status"] == 200 and r["bytes"] > 0 for r in log)


def test_hls_fmp4_with_separate_audio(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    urls = video.video_urls(fresh_sandbox.url, VID)
    master, rendition, media = hls_rendition(urls["hls_fmp4"], 720)
    assert len(master.audio) == 1 and not rendition.has_audio and rendition.group == "aac"
    assert rendition.container == "mp4" and isinstance(rendition.fetch, mf.SegmentedFetch)
    audio = mf.select(master, max_height=720).audio
    assert audio is not None and audio.codec == "mp4a"
    assert isinstance(audio.fetch, mf.PlaylistRef)
    audio = mf.with_fetch(audio, mf.parse_hls_media(get(audio.fetch.url).decode(), base_url=audio.fetch.url))
    info = assemble(tmp_path, "fmp4", fetch_track(tmp_path, "v", rendition.fetch),
                    fetch_track(tmp_path, "a", audio.fetch), media.duration)
    assert (info.height, info.width) == (720, 1280)


@pytest.mark.parametrize("height", [720, 360])  # 720p: explicit IV; 360p: IV = media sequence number
def test_hls_aes128_segments_are_really_encrypted(fresh_sandbox: SandboxProcess, catalog: video.VideoCatalog,
                                                  tmp_path: Path, height: int) -> None:
    urls = video.video_urls(fresh_sandbox.url, VID)
    _, rendition, media = hls_rendition(urls["hls_aes"], height)
    segments = rendition.fetch.segments()  # type: ignore[union-attr]
    key = get(segments[0].key.url)  # type: ignore[union-attr]
    assert key.hex() == catalog.key_hex and len(key) == 16
    name = f"{height}p"
    for seg in segments:
        assert seg.key is not None and seg.key.method == "AES-128"
        assert seg.key.iv == video.aes_iv(VID, name, seg.index)
        if height == 360:
            assert seg.key.iv == mf.iv_for_sequence(video.AES_MEDIA_SEQUENCE + seg.index)
        cipher = get(seg.url)
        plain = get(f"{fresh_sandbox.url}/media/hls/{VID}/{name}/seg{seg.index}.ts")
        assert len(cipher) % 16 == 0 and cipher[:188] != plain[:188] and cipher[0] != 0x47
        assert decrypt_aes128(cipher, key=key, iv=seg.key.iv) == plain
    info = assemble(tmp_path, "aes", fetch_track(tmp_path, "aes", rendition.fetch), None, media.duration)
    assert info.height == height


def test_hls_byterange_variant(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    urls = video.video_urls(fresh_sandbox.url, VID)
    _, rendition, media = hls_rendition(urls["hls_byterange"], 360)
    segments = rendition.fetch.segments()  # type: ignore[union-attr]
    assert {s.url for s in segments} == {f"{fresh_sandbox.url}/media/hls/{VID}/360p/all.ts"}
    assert all(s.byte_range is not None for s in segments)
    info = assemble(tmp_path, "br", fetch_track(tmp_path, "br", rendition.fetch), None, media.duration)
    assert info.height == 360
    assert [r["status"] for r in fragment_log(fresh_sandbox, "all.ts")] == [206] * 4


# --------------------------------------------------------------------------------------------------- DASH


@pytest.mark.parametrize("kind", ["dash", "dash_timeline", "dash_segmentbase"])
def test_dash_manifests_parse_and_assemble(fresh_sandbox: SandboxProcess, catalog: video.VideoCatalog,
                                           tmp_path: Path, kind: str) -> None:
    url = video.video_urls(fresh_sandbox.url, VID)[kind]
    status, headers, body = fetch(url)
    assert status == 200 and headers["Content-Type"] == "application/dash+xml"
    manifest = mf.parse_dash(body.decode(), base_url=url)
    assert manifest.duration == pytest.approx(catalog.duration)
    assert [(r.height, r.width, r.codecs, r.bandwidth, r.frame_rate) for r in manifest.video] == [
        (c.height, c.width, c.codecs, c.bandwidth, 25.0) for c in catalog.video]
    assert [(a.codecs, a.bandwidth) for a in manifest.audio] == [("mp4a.40.2", catalog.audio.bandwidth)]
    chosen = mf.select(manifest, max_height=480)
    assert chosen.video.height == 480 and chosen.audio is not None
    if kind == "dash_segmentbase":
        assert isinstance(chosen.video.fetch, mf.SingleFile)
        assert chosen.video.fetch.index_range is not None and chosen.video.fetch.init_range is not None
    else:
        assert isinstance(chosen.video.fetch, mf.SegmentedFetch)
        assert chosen.video.fetch.count == catalog.segment_count
        assert chosen.video.fetch.duration == pytest.approx(catalog.duration, rel=0.02)
        assert chosen.audio.fetch.count == catalog.segment_count  # type: ignore[union-attr]
    info = assemble(tmp_path, kind, fetch_track(tmp_path, "v", chosen.video.fetch),
                    fetch_track(tmp_path, "a", chosen.audio.fetch), manifest.duration)
    assert (info.height, info.width) == (480, 854)
    suffix = {"dash": ".m4s", "dash_timeline": ".m4s", "dash_segmentbase": "full.mp4"}[kind]
    expected = 2 * catalog.segment_count if kind != "dash_segmentbase" else 2
    assert len(fragment_log(fresh_sandbox, suffix)) == expected


def parse_sidx(box: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(timescale, earliest presentation time, [(referenced size, duration, SAP flags)]) of a v0 sidx box."""
    size, kind = struct.unpack(">I4s", box[:8])
    assert kind == b"sidx" and size == len(box) and box[8] == 0
    _, timescale, earliest, first_offset, _, count = struct.unpack(">IIIIHH", box[12:32])
    assert first_offset == 0
    refs = [struct.unpack(">III", box[32 + 12 * i : 44 + 12 * i]) for i in range(count)]
    return timescale, earliest, refs


def test_segmentbase_ranges_and_sidx_are_real(fresh_sandbox: SandboxProcess, catalog: video.VideoCatalog) -> None:
    url = video.video_urls(fresh_sandbox.url, VID)["dash_segmentbase"]
    manifest = mf.parse_dash(get(url).decode(), base_url=url)
    for rendition in [*manifest.video, *manifest.audio]:
        fetch_ = rendition.fetch
        assert isinstance(fetch_, mf.SingleFile) and fetch_.init_range and fetch_.index_range
        whole = get(fetch_.urls[0])
        init = get(fetch_.urls[0], byte_range=fetch_.init_range)
        assert init == whole[: fetch_.init_range.length] and init[4:8] == b"ftyp" and b"moov" in init
        assert init == get(fetch_.urls[0].replace("full.mp4", "init.mp4"))  # same init as the template flavour
        timescale, earliest, refs = parse_sidx(get(fetch_.urls[0], byte_range=fetch_.index_range))
        assert len(refs) == catalog.segment_count and earliest == 0
        assert sum(size for size, _, _ in refs) == len(whole) - fetch_.index_range.end - 1
        assert sum(d for _, d, _ in refs) / timescale == pytest.approx(catalog.duration, rel=0.02)
        pos = fetch_.index_range.end + 1
        for n, (size, _, sap) in enumerate(refs, start=1):  # each reference is one moof+mdat = a $Number$ segment
            assert sap >> 31 == 1 and whole[pos + 4 : pos + 8] == b"moof"
            assert whole[pos : pos + size] == get(fetch_.urls[0].replace("full.mp4", f"seg{n}.m4s"))
            pos += size


# ----------------------------------------------------------------------------------------------- Bilibili


def test_bilibili_playurl_envelope_referer_and_assembly(fresh_sandbox: SandboxProcess,
                                                        catalog: video.VideoCatalog, tmp_path: Path) -> None:
    api = fresh_sandbox.url + "/bilibili"
    url = video.video_urls(fresh_sandbox.url, VID)["bilibili_playurl"]
    assert url.startswith(api + "/x/player/wbi/playurl?")
    status, headers, body = fetch(url + "&qn=80&fourk=1&wts=1790000000&w_rid=0123456789abcdef")
    assert status == 200 and headers["Content-Type"] == "application/json; charset=utf-8"
    payload = json.loads(body)
    assert (payload["code"], payload["message"], payload["ttl"]) == (0, "0", 1)
    data = payload["data"]
    assert data["timelength"] == 4000 and data["accept_quality"] == [64, 32, 16] and data["quality"] == 64
    dash = data["dash"]
    assert dash["duration"] == 4 and dash["minBufferTime"] == 1.5
    assert [v["id"] for v in dash["video"]] == [64, 32, 16]
    first = dash["video"][0]
    for key in ("baseUrl", "base_url", "backupUrl", "backup_url", "bandwidth", "mimeType", "codecs", "width",
                "height", "frameRate", "sar", "startWithSap", "SegmentBase", "codecid"):
        assert key in first, key
    assert first["codecid"] == 7 and first["mimeType"] == "video/mp4" and first["frameRate"] == "25"
    assert [a["id"] for a in dash["audio"]] == [30280] and dash["audio"][0]["codecs"] == "mp4a.40.2"

    manifest = listed(payload)
    assert manifest.duration == 4.0
    assert [(r.height, r.width, r.codec) for r in manifest.video] == [(720, 1280, "avc1"), (480, 854, "avc1"),
                                                                      (360, 640, "avc1")]
    chosen = mf.select(manifest, max_height=480)
    assert chosen.video.height == 480 and chosen.audio is not None
    vfetch, afetch = chosen.video.fetch, chosen.audio.fetch
    assert isinstance(vfetch, mf.SingleFile) and isinstance(afetch, mf.SingleFile) and len(vfetch.urls) == 2

    assert fetch(vfetch.urls[0])[0] == 403  # no Referer: Bilibili's CDN refuses
    primary = get(vfetch.urls[0], REFERER)
    assert get(vfetch.urls[1], REFERER) == primary  # the backup mirror serves the same bytes
    assert vfetch.index_range is not None
    sidx = get(vfetch.urls[0], REFERER, vfetch.index_range)
    assert len(parse_sidx(sidx)[2]) == catalog.segment_count
    info = assemble(tmp_path, "bili", fetch_track(tmp_path, "v", vfetch, REFERER),
                    fetch_track(tmp_path, "a", afetch, REFERER), manifest.duration)
    assert (info.height, info.width) == (480, 854)
    log = [r for r in fresh_sandbox.requests() if r["path"].startswith("/media/bili/")]
    assert log[0]["status"] == 403 and log[0]["referer"] is None
    assert all(r["referer"] == REFERER["Referer"] for r in log[1:])
    assert [r["status"] for r in log if r["range"]] == [206]


def test_bilibili_durl_view_nav_and_not_found(fresh_sandbox: SandboxProcess, catalog: video.VideoCatalog,
                                              tmp_path: Path) -> None:
    api = fresh_sandbox.url + "/bilibili"
    cid = bilibili.cid_for(VID)
    payload = json.loads(fetch(f"{api}/x/player/playurl?bvid={VID}&cid={cid}&qn=32")[2])
    manifest = listed(payload)
    (rendition,) = manifest.video
    assert rendition.height == 480 and rendition.has_audio and rendition.container == "mp4"
    body = get(rendition.fetch.urls[0], REFERER)  # type: ignore[union-attr]
    assert hashlib.sha256(body).hexdigest() == catalog.rendition(480).progressive_sha256
    assert payload["data"]["durl"][0]["size"] == len(body)

    view = json.loads(fetch(f"{api}/x/web-interface/view?bvid={VID}")[2])
    assert view["code"] == 0
    data = view["data"]
    assert (data["bvid"], data["aid"], data["cid"]) == (VID, bilibili.aid_for(VID), cid)
    assert {"title", "desc", "pic", "pubdate", "owner", "stat", "pages"} <= set(data)
    assert {"mid", "name"} <= set(data["owner"]) and {"view", "like", "reply", "share"} <= set(data["stat"])
    assert data["pages"] == [{**data["pages"][0], "cid": cid, "page": 1, "duration": 4}]
    assert fetch(data["pic"])[0] == 200

    nav = json.loads(fetch(f"{api}/x/web-interface/nav")[2])
    assert nav["code"] == -101 and set(nav["data"]["wbi_img"]) == {"img_url", "sub_url"}
    assert json.loads(fetch(f"{api}/x/web-interface/view?bvid=BV_nope")[2])["code"] == -404
    assert json.loads(fetch(f"{api}/x/player/wbi/playurl?bvid={VID}&cid={cid + 1}&fnval=16")[2])["code"] == -404


def test_bilibili_risk_control_knob(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    url = video.video_urls(sb.url, VID)["bilibili_playurl"]
    view = video.video_urls(sb.url, VID)["bilibili_view"]
    sb.set_faults(bilibili_api=[{"kind": -352, "times": 2}, {"kind": "412", "endpoint": "view", "times": 1}])
    first, second = json.loads(fetch(url)[2]), json.loads(fetch(url)[2])
    assert first["code"] == second["code"] == -352 and first["message"] == "风控校验失败"
    with pytest.raises(PlatformError) as caught:
        parser.parse_playurl(first)
    assert (caught.value.kind, caught.value.code) == ("rate_limited", -352)
    assert json.loads(fetch(url)[2])["code"] == 0
    assert fetch(view)[0] == 412 and fetch(view)[0] == 200
    assert sb.stats()["faults"] == 3
    sb.reset()
    assert json.loads(fetch(url)[2])["code"] == 0
    with pytest.raises(Exception, match="HTTP 400"):
        sb.set_faults(bilibili_api=[{"kind": "-999"}])


# -------------------------------------------------------------------------------------------- progressive


def test_progressive_mp4s_have_their_declared_heights(fresh_sandbox: SandboxProcess, catalog: video.VideoCatalog,
                                                      tmp_path: Path) -> None:
    for name, url in video.video_urls(fresh_sandbox.url, VID)["progressive"].items():
        info_ = catalog.rendition(int(name[:-1]))
        status, headers, body = fetch(url)
        assert status == 200 and headers["Content-Type"] == "video/mp4"
        assert hashlib.sha256(body).hexdigest() == info_.progressive_sha256 and len(body) == info_.progressive_size
        info = verify_mp4(save(tmp_path, name + ".mp4", body), expect_audio=True,
                          expected_duration=catalog.duration)
        assert (info.height, info.width, info.faststart) == (info_.height, info_.width, True)


# --------------------------------------------------------------------------------------------- fragment faults


def test_fragment_drop_corrupt_and_cut(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    base = f"{sb.url}/media/dash/{VID}"
    seg2, seg3 = f"/media/dash/{VID}/360p/seg2.m4s", f"/media/dash/{VID}/360p/seg3.m4s"
    real2, real3 = (video.video_file(s.split("/")[2:])[0] for s in (seg2, seg3))  # type: ignore[index]
    sb.set_faults(fragment_drop=[{"path": seg2, "times": 2}, {"path_regex": r"/720p/seg\d+\.m4s$", "times": None}])
    assert [fetch(sb.url + seg2)[0] for _ in range(3)] == [404, 404, 200]
    assert [fetch(f"{base}/720p/seg{n}.m4s")[0] for n in (1, 1, 4)] == [404, 404, 404]  # permanently missing
    assert fetch(f"{base}/720p/init.mp4")[0] == 200 and fetch(f"{base}/manifest.mpd")[0] == 200
    assert sb.stats()["faults"] == 5

    sb.reset()
    sb.set_faults(fragment_corrupt=[{"path": seg3, "times": 1}])
    status, headers, junk = fetch(sb.url + seg3)
    status2, headers2, good = fetch(sb.url + seg3)
    assert status == status2 == 200 and good == real3
    assert len(junk) == len(real3) and junk != real3 and headers["ETag"] == headers2["ETag"]

    sb.reset()
    sb.set_faults(fragment_drop=[{"times": 1}])  # no path: the first segment request of any video, not manifests
    assert fetch(f"{base}/manifest.mpd")[0] == 200
    assert fetch(sb.url + seg2)[0] == 404 and fetch(sb.url + seg2)[2] == real2

    sb.reset()
    sb.set_faults(media_cut_paths={seg2: 1})  # the media_* knobs apply to fragments too
    log_before = len(sb.requests())
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(sb.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", seg2)
        response = conn.getresponse()
        with pytest.raises(http.client.IncompleteRead):
            response.read()
    finally:
        conn.close()
    assert fetch(sb.url + seg2)[2] == real2
    entries = sb.requests()[log_before:]
    assert [(e["path"], e["status"], e["aborted"]) for e in entries] == [(seg2, 200, True), (seg2, 200, False)]
    assert entries[0]["bytes"] < len(real2) == entries[1]["bytes"]
    sb.reset()
    assert sb.faults()["fragment_drop"] == [] and sb.faults()["fragment_corrupt"] == []


@pytest.mark.parametrize("size", [(64, 48), (54, 30)])  # 54: an odd chroma width (27), padded rows like 854's
def test_paint_frame_paints_the_background_and_boxes_in_their_colours(size: tuple[int, int]) -> None:
    width, height = size
    background, box, bar = (30, 160, 200), (220, 40, 60), (240, 240, 240)
    boxes = [(8, 10, 23, 25, box), (0, height - 4, width // 2, height - 1, bar)]
    frame = video.paint_frame(width, height, background, boxes)
    assert (frame.width, frame.height, frame.format.name) == (width, height, "yuv420p")
    image = frame.to_image()  # back to RGB through swscale: the colours within rounding

    def near(xy: tuple[int, int], rgb: tuple[int, int, int]) -> bool:
        return all(abs(a - b) <= 4 for a, b in zip(image.getpixel(xy), rgb, strict=True))

    assert near((2, 2), background) and near((width - 2, 2), background)
    assert near((15, 17), box) and not near((15, 17), background)
    assert near((2, height - 2), bar) and near((width - 2, height - 2), background)
