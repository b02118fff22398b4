//! A plotters drawing backend into an RGB pixel buffer, written out as PNG.
//!
//! Lines, rectangles and polygons are plotters' own rasteriser (the trait's default methods
//! over [`Raster::draw_pixel`]); text is drawn here in the public-domain 8×8 bitmap font of
//! `font8x8`, scaled by a whole factor, so a PNG needs no system font and looks the same on every
//! machine. Characters outside ASCII are drawn as their nearest ASCII ("–" as "-", "×" as "x"),
//! or "?".
//!
//! Invariant: `pixels.len() == 3 * width * height`, row-major, no padding.

use std::path::Path;

use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

/// Height and width of a glyph of the bitmap font at scale 1, in pixels.
const GLYPH: i32 = 8;

/// The RGB canvas, drawing into a buffer its caller keeps (plotters takes its backend by value).
pub(crate) struct Raster<'a> {
    width: u32,
    height: u32,
    pixels: &'a mut [u8],
}

/// The backend's error (the canvas itself cannot fail; writing the file can).
#[derive(Debug)]
pub(crate) struct RasterError(String);

impl std::fmt::Display for RasterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RasterError {}

/// Pixels of font size per vertical glyph scale: an 8×8 glyph's capitals are 7 pixels high, as
/// a vector font's of about 11 pixels.
const SIZE_PER_SCALE: f64 = 11.0;

/// The vertical glyph scale for a font of `size` pixels: the whole factor closest to it, at
/// least 1.
pub(crate) fn glyph_scale(size: f64) -> i32 {
    ((size / SIZE_PER_SCALE).round() as i32).max(1)
}

/// Width of one character cell at `size`: the advance plotters' layout assumes (its estimate
/// for fonts it cannot measure, `0.7 × size / 1.24²`), so legends and labels it sizes fit what
/// is drawn. The glyph's 8 columns are stretched over the cell.
pub(crate) fn cell_width(size: f64) -> i32 {
    ((size / 1.24 / 1.24 * 0.7).round() as i32).max(GLYPH / 2)
}

/// Width in pixels of `text` at `size`.
pub(crate) fn text_width(text: &str, size: f64) -> i32 {
    text.chars().count() as i32 * cell_width(size)
}

/// The 8×8 bitmap of `c` (rows top down, bit 0 the leftmost pixel).
fn glyph(c: char) -> [u8; 8] {
    let ascii = match c {
        c if c.is_ascii() => c,
        '–' | '—' | '−' => '-',
        '×' => 'x',
        'µ' => 'u',
        '≤' => '<',
        '≥' => '>',
        '…' => '.',
        '’' | '‘' => '\'',
        '“' | '”' => '"',
        '\u{a0}' | '\u{2009}' | '\u{202f}' => ' ',
        _ => '?',
    };
    font8x8::legacy::BASIC_LEGACY[ascii as usize]
}

/// A white RGB buffer for a canvas of `width` × `height` pixels.
pub(crate) fn white(width: u32, height: u32) -> Vec<u8> {
    vec![255; 3 * width as usize * height as usize]
}

/// Writes `pixels` (from [`white`], drawn on) as an 8-bit RGB PNG of `width` × `height`.
pub(crate) fn write_png(path: &Path, width: u32, height: u32, pixels: &[u8]) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| format!("create: {e}"))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(|e| e.to_string())?;
    w.write_image_data(pixels).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())
}

impl<'a> Raster<'a> {
    /// A canvas of `width` × `height` pixels over `pixels` (from [`white`]).
    pub(crate) fn new(width: u32, height: u32, pixels: &'a mut [u8]) -> Raster<'a> {
        assert_eq!(pixels.len(), 3 * width as usize * height as usize);
        Raster {
            width,
            height,
            pixels,
        }
    }

    /// The pixel at (`x`, `y`) as RGB (for tests).
    #[cfg(test)]
    pub(crate) fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let i = 3 * (y as usize * self.width as usize + x as usize);
        [self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]]
    }
}

impl DrawingBackend for Raster<'_> {
    type ErrorType = RasterError;

    fn get_size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<RasterError>> {
        Ok(())
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<RasterError>> {
        Ok(())
    }

    /// Blends `color` over the pixel by its alpha; points off the canvas are dropped.
    fn draw_pixel(
        &mut self,
        (x, y): BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<RasterError>> {
        if x < 0 || y < 0 || x >= self.width as i32 || y >= self.height as i32 {
            return Ok(());
        }
        let a = color.alpha.clamp(0.0, 1.0);
        let i = 3 * (y as usize * self.width as usize + x as usize);
        let (r, g, b) = color.rgb;
        for (k, c) in [r, g, b].into_iter().enumerate() {
            let old = self.pixels[i + k] as f64;
            self.pixels[i + k] = (old * (1.0 - a) + c as f64 * a).round() as u8;
        }
        Ok(())
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<RasterError>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let s = glyph_scale(style.size());
        let (w, h) = (text_width(text, style.size()), GLYPH * s);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -w,
            HPos::Center => -w / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -h / 2,
            VPos::Bottom => -h,
        };
        let trans = style.transform();
        let cell = cell_width(style.size());
        for (n, c) in text.chars().enumerate() {
            let rows = glyph(c);
            for (gy, row) in rows.iter().enumerate() {
                for gx in 0..GLYPH {
                    if row & (1 << gx) == 0 {
                        continue;
                    }
                    // Column gx covers [gx·cell/8, (gx+1)·cell/8) of the cell.
                    let (c0, c1) = (gx * cell / GLYPH, (gx + 1) * cell / GLYPH);
                    for sy in 0..s {
                        for cx in c0..c1 {
                            let x = dx + n as i32 * cell + cx;
                            let y = dy + gy as i32 * s + sy;
                            let (x, y) = trans.transform(x, y);
                            self.draw_pixel((pos.0 + x, pos.1 + y), color)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<RasterError>> {
        Ok((
            text_width(text, style.size()) as u32,
            (GLYPH * glyph_scale(style.size())) as u32,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glyphs_cover_ascii_and_stand_in_for_the_rest() {
        assert_eq!(glyph('–'), glyph('-'));
        assert_eq!(glyph('☃'), glyph('?'));
        assert_ne!(glyph('A'), glyph(' '));
        assert_eq!(text_width("abc", 24.0), 3 * 11);
        assert_eq!(glyph_scale(24.0), 2);
        assert_eq!(glyph_scale(3.0), 1);
    }

    #[test]
    fn pixels_blend_and_stay_on_the_canvas() {
        let mut buf = white(4, 3);
        let mut r = Raster::new(4, 3, &mut buf);
        let red = BackendColor {
            alpha: 1.0,
            rgb: (255, 0, 0),
        };
        r.draw_pixel((1, 1), red).unwrap();
        r.draw_pixel((-1, 7), red).unwrap();
        assert_eq!(r.pixel(1, 1), [255, 0, 0]);
        r.draw_pixel(
            (2, 2),
            BackendColor {
                alpha: 0.5,
                rgb: (0, 0, 0),
            },
        )
        .unwrap();
        assert_eq!(r.pixel(2, 2), [128, 128, 128]);
        assert_eq!(r.pixel(0, 0), [255, 255, 255]);
    }
}
