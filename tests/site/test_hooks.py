"""The site's hooks on small inputs: what they do to a page, without building the site."""

from __future__ import annotations

import base64
import re

from jitlab.site.hooks import MIN_TEXT_PX, inline_svg_images, readable_svgs

SVG = (
    '<svg width="720pt" height="216pt" viewBox="0 0 720 216">'
    '<text style="font-size: 10px; font-family: sans-serif">a</text>'
    '<text style="font-size: 8px">b</text></svg>'
)


def test_a_plot_never_shrinks_below_the_width_where_its_smallest_text_is_readable():
    page = readable_svgs(f"<p>before</p>{SVG}<p>after</p>")
    (width,) = re.findall(r'<svg style="min-width: (\d+)px"', page)
    # The smallest text, 8 of 720 units, is MIN_TEXT_PX high at this width, not below.
    assert int(width) * 8 / 720 >= MIN_TEXT_PX > (int(width) - 1) * 8 / 720
    assert page.startswith("<p>before</p>") and page.endswith("<p>after</p>")


def test_an_svg_without_text_or_with_its_own_style_is_handled():
    icon = '<svg viewBox="0 0 24 24"><path d="M0 0"/></svg>'
    assert readable_svgs(icon) == icon
    styled = SVG.replace("<svg ", '<svg style="color: red" ', 1)
    assert 'style="min-width: 855px; color: red"' in readable_svgs(styled)


def test_a_plot_shown_as_an_svg_image_becomes_the_svg_itself():
    data = base64.b64encode(('<?xml version="1.0"?>\n<!DOCTYPE svg>\n' + SVG).encode()).decode()
    page = inline_svg_images(
        f'<div><img alt="No description" src="data:image/svg+xml;base64,{data}">\n</div>'
    )
    assert page == f"<div>{SVG}\n</div>"
    png = '<img src="data:image/png;base64,iVBORw0KGgo=">'
    assert inline_svg_images(png) == png
