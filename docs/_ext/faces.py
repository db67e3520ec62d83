"""Autodoc of the public deserializer names. ``cntkio.CTFDeserializer`` and its siblings are faces of their classes
(``cntkio/_src/compat/faces.py``: a call also takes CNTK's older spellings), not classes, so autodoc would skip
them; this documenter follows the face's ``__wrapped__`` and documents the class under the public name, with the
class's signature, docstring and members."""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx
from sphinx.ext.autodoc import ClassDocumenter

from cntkio._src.compat.faces import Face


class FaceDocumenter(ClassDocumenter):
    objtype = "face"
    directivetype = "class"
    priority = ClassDocumenter.priority + 10

    @classmethod
    def can_document_member(cls, member: Any, membername: str, isattr: bool, parent: Any) -> bool:
        return isinstance(member, Face)

    def import_object(self, raiseerror: bool = False) -> bool:
        imported = super(ClassDocumenter, self).import_object(raiseerror)  # the plain import, no class check
        if imported and isinstance(self.object, Face):
            self.object = self.object.__wrapped__
            self.doc_as_attr = False
        return imported


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.autodoc")
    app.add_autodocumenter(FaceDocumenter)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
