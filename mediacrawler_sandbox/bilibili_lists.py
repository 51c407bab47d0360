"""Bilibili favourites, collections and series in the sandbox (pure: tests import it to compute what is served).

Reference: docs/sandbox.md, "bilibili_lists.py".
"""

from __future__ import annotations

from typing import Any

from .bilibili import BAD_REQUEST, NOT_FOUND, UPLOADS, _meta, aid_for, creator_uploads

FAV_ID = 1000001
SEASON = (2, 5001)
SERIES_KEY = (4, 6001)

_MID4 = [u.bvid for u in creator_uploads(4) if u.owner == 4 and u.parts == 1]
FAVOURITES: dict[int, list[str]] = {FAV_ID: [*_MID4[10:20][::-1], "BV1Up0002001"]}
SEASONS: dict[tuple[int, int], list[str]] = {
    SEASON: [u.bvid for u in sorted(creator_uploads(2), key=lambda u: u.created) if u.owner == 2]}
SERIES: dict[tuple[int, int], list[str]] = {SERIES_KEY: [u.bvid for u in creator_uploads(4) if u.parts == 1]}


def _archive(bvid: str, base: str) -> dict[str, Any]:
    meta, upload = _meta(bvid), UPLOADS[bvid]
    return {"aid": aid_for(bvid), "bvid": bvid, "title": upload.title, "pubdate": upload.created,
            "ctime": upload.created - 60, "duration": 4, "pic": f"{base}/media/img/{meta['n'] % 1000}.jpg",
            "state": 0, "stat": {"view": meta["stat"]["view"]}, "ugc_pay": 0, "interactive_video": False}


def fav_response(media_id: int | None, *, pn: int | None, ps: int | None, base: str) -> dict[str, Any]:
    """The body of ``/x/v3/fav/resource/list``."""
    pn, ps = pn or 1, ps or 20
    if media_id is None or pn < 1 or not 1 <= ps <= 20:
        return dict(BAD_REQUEST)
    if media_id not in FAVOURITES:
        return dict(NOT_FOUND)
    bvids = FAVOURITES[media_id]
    medias = []
    for bvid in bvids[(pn - 1) * ps: pn * ps]:
        meta, upload = _meta(bvid), UPLOADS[bvid]
        medias.append({"id": aid_for(bvid), "type": 2, "title": upload.title, "cover": _archive(bvid, base)["pic"],
                       "intro": f"sandbox video {bvid}", "page": upload.parts, "duration": 4 * upload.parts,
                       "upper": {"mid": upload.owner, "name": meta["owner_name"]}, "attr": 0,
                       "cnt_info": {"collect": meta["stat"]["favorite"], "play": meta["stat"]["view"],
                                    "danmaku": meta["stat"]["danmaku"]},
                       "link": f"bilibili://video/{aid_for(bvid)}", "ctime": upload.created,
                       "pubtime": upload.created, "fav_time": 1_790_100_000 - len(medias), "bvid": bvid,
                       "bv_id": bvid})
    return {"code": 0, "message": "0", "ttl": 1, "data": {
        "info": {"id": media_id, "fid": media_id // 100, "mid": 2, "title": "沙盒收藏夹", "media_count": len(bvids)},
        "medias": medias, "has_more": pn * ps < len(bvids), "ttl": 1}}


def season_response(mid: int | None, season_id: int | None, *, page_num: int | None, page_size: int | None,
                    base: str) -> dict[str, Any]:
    """The body of ``/x/polymer/web-space/seasons_archives_list``."""
    num, size = page_num or 1, page_size or 30
    if mid is None or season_id is None or num < 1 or not 1 <= size <= 100:
        return dict(BAD_REQUEST)
    bvids = SEASONS.get((mid, season_id))
    if bvids is None:
        return dict(NOT_FOUND)
    return {"code": 0, "message": "0", "ttl": 1, "data": {
        "aids": [aid_for(b) for b in bvids],
        "archives": [_archive(b, base) for b in bvids[(num - 1) * size: num * size]],
        "meta": {"category": 0, "cover": "", "description": "", "mid": mid, "name": "沙盒合集", "season_id": season_id,
                 "total": len(bvids)},
        "page": {"page_num": num, "page_size": size, "total": len(bvids)}}}


def series_response(mid: int | None, series_id: int | None, *, pn: int | None, ps: int | None,
                    base: str) -> dict[str, Any]:
    """The body of ``/x/series/archives``."""
    num, size = pn or 1, ps or 20
    if mid is None or series_id is None or num < 1 or not 1 <= size <= 100:
        return dict(BAD_REQUEST)
    bvids = SERIES.get((mid, series_id))
    if bvids is None:
        return dict(NOT_FOUND)
    return {"code": 0, "message": "0", "ttl": 1, "data": {
        "aids": [aid_for(b) for b in bvids[(num - 1) * size: num * size]],
        "archives": [_archive(b, base) for b in bvids[(num - 1) * size: num * size]],
        "page": {"num": num, "size": size, "total": len(bvids)}}}
