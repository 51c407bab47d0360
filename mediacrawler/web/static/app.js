// mediacrawler web: the little script the pages need (no build step).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // The start form shows the fields of the chosen spider.
  const spider = document.getElementById("spider");
  if (spider) spider.addEventListener("change", () => { location.search = "?spider=" + encodeURIComponent(spider.value); });
  // Pages of a running crawl refresh themselves: progress comes from the crawl's own counters.
  const jobs = document.getElementById("jobs");
  const crawl = document.getElementById("crawl");
  if ((jobs && jobs.dataset.running === "1") || (crawl && crawl.dataset.state === "running")) {
    setTimeout(() => location.reload(), 1500);
  }
  // A picture the store does not have (the database names an object since removed) says so instead.
  for (const img of document.querySelectorAll(".card img")) {
    const missing = () => {
      const note = document.createElement("div");
      note.className = "noimg";
      note.textContent = "not in the store";
      img.replaceWith(note);
    };
    if (img.complete && img.naturalWidth === 0) missing(); else img.addEventListener("error", missing);
  }
  const log = document.getElementById("log");
  if (log) log.scrollTop = log.scrollHeight;
  // A Live Photo's clip plays while the pointer is on it.
  for (const clip of document.querySelectorAll("video.live-clip")) {
    clip.addEventListener("mouseenter", () => clip.play().catch(() => {}));
    clip.addEventListener("mouseleave", () => clip.pause());
  }
});
