"""A Bilibili part's extras in the sandbox: subtitles and chapters (``/x/player/wbi/v2?aid=&cid=``), the subtitle
cue JSON, and the danmaku XML (``comment.bilibili.com/<cid>.xml``, raw deflate), timed on the part's real media
(:data:`~.video.DURATION` seconds). Served by :mod:`.bilibili_site`; see docs/sandbox.md.
"""

from __future__ import annotations

import zlib
from typing import Any
from xml.sax.saxutils import escape

from . import bilibili
from .video import DURATION

#: The subtitle tracks of every part: (lan, lan_doc, cue texts).
TRACKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("zh-CN", "中文（中国）", ("猫咪醒来了", "伸个懒腰 & 打哈欠", "<晚安>")),
    ("en-US", "English (United States)", ("The cat wakes up", "A stretch & a yawn", "<good night>")),
)


def _part(aid: int | None, cid: int | None) -> tuple[str, int] | None:
    """``(bvid, cid)`` when ``cid`` is a part of the video ``aid``."""
    bvid = bilibili.bvid_of_aid(aid) if aid is not None else None
    if bvid is None or not any(c == cid for c, _ in bilibili.parts_of(bvid)):
        return None
    assert cid is not None
    return bvid, cid


def _cue_times() -> list[tuple[float, float]]:
    step = DURATION / len(TRACKS[0][2])
    return [(round(i * step, 3), round((i + 1) * step, 3)) for i in range(len(TRACKS[0][2]))]


def player_response(aid: int | None, cid: int | None, *, base: str) -> dict[str, Any]:
    """The body of ``/x/player/wbi/v2?aid=&cid=``: ``data.subtitle.subtitles[]`` (protocol-relative URLs, as
    Bilibili gives them) and ``data.view_points[]`` (two chapters splitting the part)."""
    found = _part(aid, cid)
    if found is None:
        return dict(bilibili.NOT_FOUND)
    bvid, cid = found
    host = base.split("//", 1)[1]
    half = int(DURATION) // 2
    return {"code": 0, "message": "0", "ttl": 1, "data": {
        "aid": aid, "bvid": bvid, "cid": cid,
        "subtitle": {"allow_submit": False, "lan": "", "lan_doc": "", "subtitles": [
            {"id": i + 1, "lan": lan, "lan_doc": doc, "is_lock": False, "type": 0, "ai_type": 0, "ai_status": 0,
             "subtitle_url": f"//{host}/bilibili/subtitle/{cid}/{lan}.json?auth_key=1793498400-0-0-sandbox"}
            for i, (lan, doc, _) in enumerate(TRACKS)]},
        "view_points": [
            {"type": 2, "from": 0, "to": half, "content": "开场", "imgUrl": f"{base}/media/img/1.jpg",
             "logoUrl": "", "team_type": "", "team_name": ""},
            {"type": 2, "from": half, "to": int(DURATION), "content": "结尾 & 彩蛋", "imgUrl": f"{base}/media/img/2.jpg",
             "logoUrl": "", "team_type": "", "team_name": ""}],
    }}


def subtitle_body(cid: int, lan: str) -> dict[str, Any] | None:
    """The cue JSON of track ``lan`` (Bilibili's shape: style fields and ``body[]`` of from/to/content)."""
    texts = next((t for code, _, t in TRACKS if code == lan), None)
    if texts is None:
        return None
    return {"font_size": 0.4, "font_color": "#FFFFFF", "background_alpha": 0.5, "background_color": "#9C27B0",
            "Stroke": "none", "type": "AIsubtitle", "lang": lan, "version": "v1.6.0.4",
            "body": [{"from": start, "to": end, "sid": i + 1, "location": 2, "content": text, "music": 0.0}
                     for i, ((start, end), text) in enumerate(zip(_cue_times(), texts, strict=True))]}


def danmaku_xml(cid: int) -> str:
    """The danmaku of part ``cid`` as comment.bilibili.com serves it (inflated)."""
    lines = [f'<d p="{start},1,25,16777215,{1_790_000_000 + i},0,{cid % 0xFFFF:x},{cid + i},11">'
             f"{escape(text)}</d>" for i, ((start, _), text) in enumerate(zip(_cue_times(), TRACKS[0][2], strict=True))]
    return ('<?xml version="1.0" encoding="UTF-8"?><i><chatserver>chat.bilibili.com</chatserver>'
            f"<chatid>{cid}</chatid><mission>0</mission><maxlimit>1000</maxlimit><state>0</state>"
            f"<real_name>0</real_name><source>k-v</source>{''.join(lines)}</i>")


def deflated(text: str) -> bytes:
    """``text`` raw-deflate compressed (no zlib header), as comment.bilibili.com sends it."""
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(text.encode("utf-8")) + compressor.flush()
