"""Small PDFs with real text for the tests, written by hand (objects, content streams, xref)."""

from __future__ import annotations


def pdf_with_pages(texts: list[str], *, deflated: bytes | None = None) -> bytes:
    """A PDF with one page per text, each drawn in Helvetica (text must be plain ASCII);
    `deflated`: the first page's content stream instead, as given (FlateDecode)."""
    objects: list[bytes] = []
    count = len(texts)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(count))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode())
    font_ref = 3 + 2 * count
    for i, text in enumerate(texts):
        content_ref = 4 + 2 * i
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 300] /Contents {content_ref} 0 R "
            f"/Resources << /Font << /F1 {font_ref} 0 R >> >> >>".encode()
        )
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 20 250 Td ({escaped}) Tj ET".encode()
        extra = b""
        if deflated is not None and i == 0:
            stream, extra = deflated, b" /Filter /FlateDecode"
        head = b"<< /Length %d%s >>\nstream\n" % (len(stream), extra)
        objects.append(head + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
