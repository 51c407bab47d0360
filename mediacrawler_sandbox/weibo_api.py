"""m.weibo.cn's payloads rendered from the sandbox's Weibo world (:mod:`mediacrawler_sandbox.weibo`):
:func:`timeline_response`, :func:`search_response`, :func:`show_response` and :func:`extend_response` are the JSON
bodies of ``/api/container/getIndex``, ``/statuses/show`` and ``/statuses/extend``; :func:`dumps_php` serializes them
the way m.weibo.cn does (``\\/`` and ``\\uXXXX`` escapes). Pure, like the model: tests import it to compute exactly
what the sandbox serves.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .det import stable_int
from .weibo import WeiboPic, WeiboPost, WeiboUser, WeiboVideo, WeiboWorld, format_created_at

#: What m.weibo.cn answers for a page past the last one (and for unknown containers).
END_OF_LIST: dict[str, Any] = {"ok": 0, "msg": "这里还没有内容", "data": {"cards": []}}


def dumps_php(payload: Any) -> bytes:
    """Serialize like m.weibo.cn (PHP ``json_encode``): ASCII only (``\\uXXXX``), ``/`` escaped as ``\\/``."""
    text = json.dumps(payload, ensure_ascii=True, separators=(",", ":"))
    return text.replace("/", "\\/").encode("ascii")


def render_user(user: WeiboUser, base: str) -> dict[str, Any]:
    """The ``user`` object of an mblog."""
    return {
        "id": user.id,
        "screen_name": user.screen_name,
        "profile_image_url": f"{base}/media/weibo/orj180/{user.avatar_pid}.jpg",
        "profile_url": f"https://m.weibo.cn/u/{user.id}?uid={user.id}&luicode=10000011&lfid=107603{user.id}",
        "statuses_count": user.statuses_count,
        "verified": user.verified,
        "verified_type": 0 if user.verified else -1,
        "close_blue_v": False,
        "description": user.description,
        "gender": "f" if user.id % 2 else "m",
        "mbtype": 0,
        "svip": 0,
        "urank": 4,
        "mbrank": 0,
        "follow_me": False,
        "following": False,
        "follow_count": user.follow_count,
        "followers_count": user.followers_count,
        "cover_image_phone": "https://tva1.sinaimg.cn/crop.0.0.640.640.640/549d0121tw1egm1kjly3jj20hs0hsq4f.jpg",
        "avatar_hd": f"{base}/media/weibo/orj1080/{user.avatar_pid}.jpg",
        "like": False,
        "like_me": False,
        "badge": {"user_name_certificate": 1},
    }


def _render_pic(pic: WeiboPic, base: str) -> dict[str, Any]:
    thumb_w, thumb_h = pic.thumb_size
    return {
        "pid": pic.pid,
        "url": base + pic.path("orj360"),
        "size": "orj360",
        "geo": {"width": thumb_w, "height": thumb_h, "croped": False},
        "large": {
            "size": "large",
            "url": base + pic.path("large"),
            "geo": {"width": str(pic.width), "height": str(pic.height), "croped": False},
        },
    }


def _render_video(video: WeiboVideo, post: WeiboPost, user: WeiboUser | None, base: str) -> dict[str, Any]:
    fields = {name: (base + path if path else "") for name, path in video.field_paths().items()}
    name = user.screen_name if user else ""
    return {
        "type": "video",
        "object_type": 11,
        "url_ori": f"http://t.cn/A6{post.bid[:6]}",
        "page_pic": {"width": 320, "pid": video.cover_pid, "source": 2, "is_self_cover": 1, "type": 1,
                     "url": f"{base}/media/weibo/orj480/{video.cover_pid}.jpg", "height": 240},
        "page_url": f"https://video.weibo.com/show?fid={video.object_id}&luicode=10000011&lfid=107603",
        "object_id": video.object_id,
        "page_title": f"{name}的微博视频",
        "title": video.title,
        "content1": f"{name}的微博视频",
        "content2": video.title,
        "video_orientation": "horizontal",
        "play_count": "1.2万次播放",
        "media_info": {
            "stream_url": fields["stream_url"],
            "stream_url_hd": fields["stream_url_hd"],
            "duration": video.duration,
            "mp4_720p_mp4": fields["mp4_720p_mp4"],
            "mp4_hd_url": fields["mp4_hd_url"],
            "mp4_sd_url": fields["mp4_sd_url"],
            "video_title": video.title,
            "h265_mp4_hd": "",
            "h265_mp4_ld": "",
            "inch_4_mp4_hd": "",
            "inch_5_mp4_hd": "",
            "inch_5_5_mp4_hd": "",
        },
        "urls": {
            key: base + video.path(q)
            for key, q in (("mp4_720p_mp4", "720"), ("mp4_hd_mp4", "hd"), ("mp4_ld_mp4", "sd"))
            if q in video.qualities
        },
    }


def _render_webpage(webpage: dict[str, str], base: str) -> dict[str, Any]:
    return {
        "type": "webpage",
        "object_type": 0,
        "page_id": webpage["page_id"],
        "page_url": webpage["page_url"],
        "page_title": webpage["page_title"],
        "content1": webpage["content1"],
        "content2": webpage["content2"],
        "page_pic": {"url": f"{base}/media/weibo/thumbnail/{webpage['page_pic_pid']}.jpg"},
    }


def render_mblog(world: WeiboWorld, post: WeiboPost, base: str, *, nested: bool = False) -> dict[str, Any]:
    """The ``mblog`` dict of ``post`` as m.weibo.cn serves it; ``base`` is the sandbox origin for media URLs."""
    if post.deleted:
        return {
            "id": post.id,
            "mid": post.mid,
            "text": post.text,
            "user": None,
            "deleted": "1",
            "created_at": "",
            "visible": {"type": 0, "list_id": 0},
            "pic_num": 0,
            "isLongText": False,
            "bid": post.bid,
            "reposts_count": 0,
            "comments_count": 0,
            "attitudes_count": 0,
        }
    user = world.users[post.user_id] if post.user_id is not None else None
    assert post.created_at is not None
    text = post.truncated_text()
    mblog: dict[str, Any] = {
        "visible": {"type": 0, "list_id": 0},
        "created_at": format_created_at(post.created_at),
        "id": post.id,
        "mid": post.mid,
        "can_edit": False,
        "show_additional_indication": 0,
        "text": text,
        "textLength": len(re.sub(r"<[^>]+>", "", post.text)),
        "source": post.source,
        "favorited": False,
        "pic_ids": [p.pid for p in post.pics],
        "is_paid": False,
        "mblog_vip_type": 0,
        "user": render_user(user, base) if user else None,
        "reposts_count": post.reposts_count,
        "comments_count": post.comments_count,
        "reprint_cmt_count": 0,
        "attitudes_count": post.attitudes_count,
        "pending_approval_count": 0,
        "isLongText": post.is_long_text,
        "show_mlevel": 0,
        "darwin_tags": [],
        "hot_page": {"fid": "232532_mblog", "feed_detail_type": 0},
        "mblogtype": 0,
        "rid": f"0_0_0_{post.id[-8:]}_0_0_0",
        "more_info_type": 0,
        "extern_safe": 0,
        "content_auth": 0,
        "region_name": f"发布于 {post.region}" if post.region else "",
        "mlevel": 0,
        "bid": post.bid,
        "pic_num": len(post.pics),
    }
    if post.pics:
        first = post.pics[0]
        mblog["thumbnail_pic"] = base + first.path("thumbnail")
        mblog["bmiddle_pic"] = base + first.path("bmiddle")
        mblog["original_pic"] = base + first.path("large")
        mblog["pics"] = [_render_pic(p, base) for p in post.pics]
        for rendered in mblog["pics"]:
            if rendered["pid"] in post.live_pids:
                # As m.weibo.cn marks a Live Photo: the still as usual, its motion clip behind videoSrc.
                rendered.update(type="livephoto", videoSrc=base + world.pics[rendered["pid"]].live_path())
    if post.mixed_videos:
        # A mixed post (pictures and videos together) lists everything in mix_media_info, in order.
        mblog["mix_media_info"] = {"items": [
            *({"type": "pic", "id": p.pid, "data": {"pic_id": p.pid, "largest": {"url": base + p.path("large"),
                                                                                  "width": p.width,
                                                                                  "height": p.height},
                                                     "thumbnail": {"url": base + p.path("thumbnail")}}}
              for p in post.pics),
            *({"type": "video", "id": v.object_id,
               "data": {k: d for k, d in _render_video(v, post, user, base).items()
                        if k in ("object_id", "page_pic", "media_info", "title")}}
              for v in post.mixed_videos)]}
    if post.video is not None:
        mblog["page_info"] = _render_video(post.video, post, user, base)
    elif post.webpage is not None:
        mblog["page_info"] = _render_webpage(post.webpage, base)
    if post.retweeted_id is not None and not nested:
        mblog["retweeted_status"] = render_mblog(world, world.posts[post.retweeted_id], base, nested=True)
        mblog["raw_text"] = re.sub(r"<[^>]+>", "", post.text)
    return mblog


def _post_card(world: WeiboWorld, post: WeiboPost, base: str, lfid: str) -> dict[str, Any]:
    return {
        "card_type": 9,
        "itemid": "",
        "scheme": f"https://m.weibo.cn/status/{post.bid}?mblogid={post.bid}&luicode=10000011&lfid={lfid}",
        "mblog": render_mblog(world, post, base),
        "show_type": 0,
    }


def _text_card(desc: str) -> dict[str, Any]:
    return {"card_type": 4, "desc": desc, "show_type": 0, "itemid": ""}


def parse_containerid(containerid: str) -> tuple[str, str] | None:
    """Classify a containerid: ``("timeline", uid)``, ``("search", keyword)`` or ``None``."""
    match = re.fullmatch(r"(107603|230413)(\d+)(?:_-_\w+)?", containerid)
    if match:
        return "timeline", match.group(2)
    if containerid.startswith("100103"):
        from urllib.parse import parse_qs

        query = parse_qs(containerid[len("100103") :])
        keyword = (query.get("q") or [""])[0]
        if keyword:
            return "search", keyword
    return None


def timeline_response(
    world: WeiboWorld,
    containerid: str,
    uid: int,
    *,
    page: int | None,
    since_id: str | None,
    base: str,
) -> dict[str, Any]:
    """The getIndex payload for a user timeline, paged by ``page`` or by ``since_id`` (which wins)."""
    if uid not in world.timelines:
        return END_OF_LIST
    ids = world.timelines[uid]
    if since_id:
        start = world.index_after_since_id(uid, since_id)
        if start is None:
            return END_OF_LIST
    else:
        start = ((page or 1) - 1) * world.per_page
    if start < 0 or start >= len(ids):
        return END_OF_LIST
    page = start // world.per_page + 1
    posts = [world.posts[i] for i in ids[start : start + world.per_page]]
    lfid = f"107603{uid}"
    cards: list[dict[str, Any]] = []
    if page == 1:
        cards.append({"card_type": 31, "show_type": 0, "desc": "搜索他的微博",
                      "scheme": f"https://m.weibo.cn/p/index?containerid=231802_{uid}", "itemid": ""})
        cards.append({"card_type": 42, "show_type": 0, "desc": "全部微博", "display_arrow": 0, "itemid": ""})
        pinned = world.pinned.get(uid)
        if pinned is not None:
            # Weibo shows a pinned post first on page 1, marked isTop, out of time order.
            card = _post_card(world, world.posts[pinned], base, lfid)
            card["mblog"]["isTop"] = 1
            cards.append(card)
    # One post per page nests in a card_group (as "热门" groups do), next to a non-post card.
    grouped = (page * 3) % len(posts)
    for k, post in enumerate(posts):
        card = _post_card(world, post, base, lfid)
        if k == grouped:
            cards.append({"card_type": 11, "show_type": 0, "itemid": "",
                          "card_group": [_text_card("热门微博"), card]})
        else:
            cards.append(card)
        if k == 2:
            cards.append({"card_type": 58, "show_type": 0, "desc": "以下为全部微博", "name": "", "itemid": ""})
    last_index = start + len(posts) - 1
    cards.append(_text_card("没有更多了" if last_index == len(ids) - 1 else "加载更多"))
    real_total = len(ids)
    return _cardlist(
        containerid, cards,
        # Deliberately wrong, like the real one: clients must stop on the end-of-list answer only.
        {"total": real_total + 17 + stable_int(world.seed, uid, bits=5),
         # The cursor of the next page: the last post's id (served on the last page too).
         "since_id": int(ids[last_index]), "page": page},
        {"scheme": f"sinaweibo://cardlist?containerid={containerid}", "showAppTips": 0},
    )


def _cardlist(containerid: str, cards: list[dict[str, Any]], info: dict[str, Any],
              tail: dict[str, Any]) -> dict[str, Any]:
    """A ``getIndex`` answer: the list's info, then its cards (keys in the order m.weibo.cn sends them)."""
    return {"ok": 1, "data": {"cardlistInfo": {"containerid": containerid, "v_p": 42, "show_style": 1, **info},
                              "cards": cards, **tail}}


def search_tab(containerid: str) -> int:
    """The tab of a search containerid (``100103type=61&q=…`` → 61; 1, "all", when unreadable)."""
    match = re.match(r"100103type=(\d+)", containerid)
    return int(match.group(1)) if match else 1


def search_response(
    world: WeiboWorld, containerid: str, keyword: str, *, page: int | None, base: str
) -> dict[str, Any]:
    """The getIndex payload for ``page_type=searchall``: posts mostly inside card_type 11 groups, of the tab the
    containerid names (:meth:`WeiboWorld.search_tab`)."""
    page = page or 1
    posts = world.search_page(keyword, page, search_tab(containerid))
    if not posts:
        return END_OF_LIST
    lfid = "100103type=1&q=" + keyword
    cards: list[dict[str, Any]] = []
    if page == 1:
        cards.append({"card_type": 42, "show_type": 0, "desc": f"“{keyword}”的综合结果", "display_arrow": 0,
                      "itemid": ""})
    # Top-level first post, then groups of three posts with a user card or hot-words card in between.
    rest = list(posts)
    cards.append(_post_card(world, rest.pop(0), base, lfid))
    group_no = 0
    while rest:
        chunk, rest = rest[:3], rest[3:]
        group: list[dict[str, Any]] = [_post_card(world, p, base, lfid) for p in chunk]
        if group_no % 2 == 0:
            author = world.users[world.timeline_uids[0]] if world.timeline_uids else None
            group.insert(1, {"card_type": 10, "show_type": 0, "itemid": "",
                             "user": render_user(author, base) if author else None, "desc1": "相关用户"})
        else:
            group.append({"card_type": 17, "show_type": 0, "itemid": "", "title": "相关搜索",
                          "group": [{"name": f"{keyword}{k}", "scheme": ""} for k in range(3)]})
        cards.append({"card_type": 11, "show_type": 0, "itemid": "", "card_group": group})
        group_no += 1
    cards.append({"card_type": 58, "show_type": 0, "desc": "以上为综合结果", "name": "", "itemid": ""})
    return _cardlist(containerid, cards, {"total": len(world.search(keyword)) * 3 + 11, "page": page},
                     {"scheme": ""})


def show_response(world: WeiboWorld, post_id: str, base: str) -> dict[str, Any]:
    """``/statuses/show?id=`` payload: the post as its own mblog (fresh media URLs, like the real endpoint)."""
    post = world.posts.get(post_id)
    if post is None or post.deleted:
        return {"ok": 0, "errno": "20101", "msg": "target weibo does not exist!"}
    return {"ok": 1, "data": render_mblog(world, post, base)}


def extend_response(world: WeiboWorld, post_id: str) -> dict[str, Any]:
    """``/statuses/extend?id=`` payload: the full HTML text and the counts."""
    post = world.posts.get(post_id)
    if post is None or post.deleted:
        return {"ok": 0, "errno": "20101", "msg": "target weibo does not exist!"}
    return {
        "ok": 1,
        "data": {
            "ok": 1,
            "longTextContent": post.text,
            "reposts_count": post.reposts_count,
            "comments_count": post.comments_count,
            "attitudes_count": post.attitudes_count,
        },
    }
