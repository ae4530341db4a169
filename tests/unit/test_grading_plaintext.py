"""Plain-text and Unicode math in answers (agentmath.grading.plaintext): graded as the LaTeX
it means, in either role (gold or prediction); LaTeX answers pass through unchanged."""

from __future__ import annotations

import pytest

from agentmath.grading import check
from agentmath.grading.plaintext import latex_spelling

SAME = [
    (r"\left( 3, \frac{\pi}{2} \right)", "(3, pi/2)"),
    (r"\frac{\pi}{4}", "pi/4"),
    (r"\frac{3\pi}{2}", "3pi/2"),
    (r"\pi^2", "pi^2"),
    (r"2\pi", "2π"),
    (r"\sqrt{2}", "sqrt2"),
    (r"\sqrt{2}", "√2"),
    (r"2\sqrt{3}", "2 sqrt(3)"),
    (r"\frac{1}{\sqrt{2}}", "1/sqrt2"),
    (r"\frac{\sqrt{x+1}}{2}", "sqrt(x+1)/2"),
    ("x^2+1", "x**2+1"),
    (r"90^\circ", "90°"),
    (r"\infty", "∞"),
    (r"e^{2}", "exp(2)"),
    (r"\ln 2", "ln(2)"),
    ("-5", "−5"),
    (r"\frac{1}{3}", r"0.\overline{3}"),  # a repeating decimal: its exact fraction
    (r"\frac{137}{110}", r"1.2\overline{45}"),
    (r"\frac{1}{7}", r".\overline{142857}"),
    ("42", "42 in."),  # a number and a plain unit
    ("12", "12 cm^2"),
    ("3.5", "3.5kg"),
    ("1000", "1e3"),  # scientific notation
    ("0.00025", "2.5E-4"),
    (r"\frac{1}{2}", "½"),  # Unicode's vulgar fractions, a mixed number too
    (r"\frac{5}{2}", "2½"),
    (r"\frac{3}{4}", "¾"),
    (r"\frac{31}{8}", "3⅞"),
    ("x^2+1", "x²+1"),  # superscript digits
    ("10^{-3}", "10⁻³"),
    ("1024", "2¹⁰"),
]
DIFFERENT = [
    (r"\frac{\pi}{4}", "pi/3"),
    (r"\sqrt{2}", "sqrt3"),
    ("x^2+1", "x**3+1"),
    (r"90^\circ", "45°"),
    (r"\ln 2", "ln(3)"),
    (r"2\sqrt{3}", "3 sqrt(2)"),
    ("p", "pi"),
    (r"\frac{1}{3}", r"0.\overline{4}"),
    ("42", "43 in."),
    ("1000", "1e4"),
    ("12", "12 x^2"),  # a variable is no unit
    (r"\frac{1}{2}", "⅓"),
    (r"\frac{5}{2}", "2¼"),
    ("x^2+1", "x³+1"),
]


@pytest.mark.parametrize(("latex", "plain"), SAME)
def test_plain_spellings_grade_as_their_latex(latex: str, plain: str) -> None:
    assert check(latex, plain).correct is True
    assert check(plain, latex).correct is True  # a plain-text gold too


@pytest.mark.parametrize(("latex", "plain"), DIFFERENT)
def test_other_values_still_differ(latex: str, plain: str) -> None:
    assert check(latex, plain).correct is False
    assert check(plain, latex).correct is False


@pytest.mark.parametrize("answer", [
    r"\frac{\pi}{4}", r"\sqrt{2}", r"\ln 2", r"\text{spin}", "pie", "sqrt", "sinx", "42",
    r"\left( 3, \frac{\pi}{2} \right)", r"\begin{pmatrix}1\\2\end{pmatrix}",
    "3m", "2s", "12 x^2", "e5", "x e3",  # one-letter units only after a space
])  # fmt: skip
def test_latex_and_words_pass_through_unchanged(answer: str) -> None:
    assert latex_spelling(answer) == answer


def test_roots_nest_and_keep_what_follows() -> None:
    assert latex_spelling("sqrt(sqrt(2))+1") == r"\sqrt{\sqrt{2}}+1"
    assert latex_spelling("√(2)+√3") == r"\sqrt{2}+\sqrt{3}"
    assert latex_spelling("sqrt(2") == "sqrt(2"  # unbalanced: left alone
