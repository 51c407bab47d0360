"""Resume checkpoints below the layers that use them: the document (:mod:`.model`) and its stores (:mod:`.store`).

The extension that keeps them is :mod:`mediacrawler.extensions.checkpoint`; see docs/architecture.md, "Checkpoints".
"""
