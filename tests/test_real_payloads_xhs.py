"""XHS parser on page states captured from www.xiaohongshu.com by others (tests/fixtures/real/xhs/, provenance in
tests/fixtures/real/SOURCES.md). Expected values are read from the raw state by hand, never by running the parser.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mediacrawler.parsers import xhs

REAL = Path(__file__).parent / "fixtures" / "real" / "xhs"


def _page(name: str) -> str:
    text = (REAL / name).read_text("utf-8")
    # The browser-serialized state (.json) is what the page's script assigns: wrapped as the site sends it.
    return text if name.endswith(".html") else f"<html><script>window.__INITIAL_STATE__={text}</script></html>"


def _raw_mcp_image() -> dict:
    state = json.loads((REAL / "mcp_note_68be8f27_state.json").read_text("utf-8"))
    return state["note"]["noteDetailMap"]["68be8f27000000001d02f3ae"]["note"]["imageList"][0]


def test_older_layout_note_is_read_not_recorded_as_deleted() -> None:
    # note.note (no noteDetailMap), serverTime 2023-04-06: a video note.
    post = xhs.parse_note_page(_page("old_shape_note_62a70ac9_state.html"), note_id="62a70ac9000000001b035550")
    assert post.deleted is False and post.post_id == "62a70ac9000000001b035550"
    assert post.author is not None
    assert (post.author.id, post.author.name) == ("5afb9cdd4eacab3d22a3e087", "ZHANGJUNA")
    assert post.created_at == "2022-06-13T10:00:41Z"  # time 1655114441000 ms
    assert post.extra["updated_at"] == "2022-06-13T10:00:42Z"  # lastUpdateTime 1655114442000
    assert post.extra["title"] == "新手小雏菊教程" and post.text == ""  # desc is two spaces
    assert post.extra["tags"][0] == "美甲" and post.extra["type"] == "video"
    # interactInfo: likedCount "1k+", commentCount "10+", shareCount "100+", collectedCount "1k+" (lower bounds).
    assert (post.metrics.likes, post.metrics.comments, post.metrics.shares) == (1000, 10, 100)
    image, video = post.media
    assert (image.kind, image.url, image.width, image.height) == (
        "image", "https://sns-img-qc.xhscdn.com/d51d9183-279c-11fc-bc72-808c5409fc91", 1080, 1920)
    # stream.h264[0]: 720x1280 mp4, masterUrl + 3 backupUrls; h265[] and av1[] are empty.
    [rendition] = video.renditions or []
    assert (rendition["codec"], rendition["width"], rendition["height"], rendition["size"]) == (
        "avc1", 720, 1280, 2482754)
    assert rendition["url"].startswith(
        "http://sns-video-qc.xhscdn.com/pre_post/01e2a70aa66bc61801037003815c82a6c1_259")
    assert len(rendition["alternates"]) == 3 and video.duration == 25.0  # capa.duration


def test_live_photo_note_keeps_its_picture_at_default_quality_and_its_motion_clip() -> None:
    post = xhs.parse_note_page(_page("mcp_note_68be8f27_state.json"), note_id="68be8f27000000001d02f3ae")
    assert post.deleted is False
    assert post.author is not None and (post.author.id, post.author.name) == ("67ff0349000000000a03e859", "kk")
    assert post.created_at == "2025-09-08T08:09:11Z"  # time 1757318951000
    assert post.extra["title"] == "雅思老师的工资条，这就是努力8.0的意义吧"
    assert post.text.startswith("#雅思考试[话题]# #雅思听力[话题]#")
    metrics = post.metrics
    assert (metrics.likes, metrics.comments, metrics.shares, post.extra["collected"]) == (3, 6, 2, 2)
    assert post.extra["ip_location"] == "湖南" and len(post.extra["tags"]) == 8
    # imageList[0] is a Live Photo (livePhoto: true, its motion clip in imageList[0].stream.h264): the picture is
    # the image asset, WB_DFT (…!nd_dft_wlteh_web) first, the WB_PRV preview last; then the clip, naming it.
    image, clip = post.media
    assert image.kind == "image" and (image.width, image.height) == (1080, 1304)
    assert image.url.endswith("1040g3k831m5ekesg5m805pvv0d4inq2pcofrib0!nd_dft_wlteh_webp_3")  # infoList WB_DFT
    assert image.alternates == [i["url"] for i in _raw_mcp_image()["infoList"] if i["imageScene"] == "WB_PRV"]
    assert not any(".mp4" in u for u in [image.url, *image.alternates])
    [h264] = _raw_mcp_image()["stream"]["h264"]
    assert (clip.kind, clip.live_of, clip.url, clip.alternates) == (
        "video", image.key, h264["masterUrl"], h264["backupUrls"])
    assert [(r["codec"], r["url"]) for r in clip.renditions or []] == [("avc1", h264["masterUrl"])]


def test_profile_cards_in_order_with_their_non_preview_cover() -> None:
    html = _page("spider_xhs_profile_6185ce66.html")
    page = xhs.parse_profile_page(html, user_id="6185ce66000000001000705b")
    assert page.user is not None and page.user.name == "鱼鱼不吃鱼" and page.unavailable is None
    assert [n.note_id for n in page.notes] == [
        "6515ad71000000001e02e5a0", "65112fdf000000001e02f9bb", "650e837f000000001e02384d",
        "650ae469000000001e0227a4", "65081b83000000001e02069e", "64c3f1e8000000000b02a14c"]
    assert page.has_more is False  # noteQueries[0].hasMore
    assert not any(n.pinned for n in page.notes)
    assert page.notes[0].listed_at == "2023-09-28T16:44:33Z"  # ObjectId prefix 0x6515ad71 = 1695919473
    cards = [xhs.post_from_card(n.card, note_id=n.note_id) for n in page.notes]
    assert [c.metrics.likes for c in cards] == [2, 0, 0, 1, 4, 1837]
    assert cards[0].extra["title"] == "南宁好GING，我爱南宁~轨道地产惊喜多多！"
    for card in cards:
        [cover] = card.media
        # cover.infoList: FD_PRV_WEBP (…_prv_1, the preview) and FD_WM_WEBP (…_mw_1): the latter first.
        assert cover.url.endswith("!nc_n_webp_mw_1") and cover.alternates[-1].endswith("!nc_n_webp_prv_1")
    assert (cards[0].media[0].width, cards[0].media[0].height) == (1440, 2560)


def test_feed_api_note_card_is_refused_not_read() -> None:
    # /api/sns/web/v1/feed (snake_case note_card): not a page this parser claims.
    body = (REAL / "spider_xhs_feed_api_note_card_video.json").read_text("utf-8")
    assert json.loads(body)["data"]["items"][0]["id"] == "64356527000000001303282b"
    with pytest.raises(ValueError, match="no window.__INITIAL_STATE__"):
        xhs.parse_note_page(body, note_id="64356527000000001303282b")
    wrapped = f"<script>window.__INITIAL_STATE__={body}</script>"
    with pytest.raises(ValueError, match="holds no note 64356527000000001303282b"):
        xhs.parse_note_page(wrapped, note_id="64356527000000001303282b")
