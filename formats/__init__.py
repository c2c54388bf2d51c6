"""The format readers: one module per format family, each behind the one interface extract.py
dispatches to (a function `path -> Extracted` that raises only ExtractError).

Layer: readers, between the dispatcher (extract.py, above) and the ground modules (paths,
limits, atomic, safeopen, below). office (DOCX/XLSX/PPTX), hwp (HWPX, HWP 5), ofd, legacy
(DOC/XLS/PPT), markup (RTF, EPUB, ODF, HTML), mail (EML, MSG), ocr (images, scanned pages),
audio (recordings); zipxml and pdflayout are shared helpers of the zip/XML and PDF readers.
"""
