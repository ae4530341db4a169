"""Code cells of the kind real models write (ToRA, MathCoder, NeMo-Skills, DeepMath) that once
failed only because of the sandbox: lazily imported standard-library modules, pandas, plots,
interpreter limits. They must run with the default configuration."""

from __future__ import annotations

import pytest

from agentmath.sandbox import Sandbox

CELLS = {
    "datetime_strptime": ("from datetime import datetime\n"
                          "(datetime.strptime('2024-03-01', '%Y-%m-%d') - "
                          "datetime.strptime('2024-02-01', '%Y-%m-%d')).days", "29"),
    "time_strptime": ("import time\ntime.strptime('1999-12-31', '%Y-%m-%d').tm_yday", "365"),
    "scipy_io_and_integrate": ("import scipy.io, scipy.integrate\n"
                               "round(scipy.integrate.quad(lambda x: x**2, 0, 3)[0], 6)", "9.0"),
    "scipy_optimize": ("from scipy.optimize import brentq\nround(brentq(lambda x: x**3 - 2, 0, 2), "
                       "6)", "1.259921"),
    "pandas_frame": ("import pandas as pd\ndf = pd.DataFrame({'n': range(1, 11)})\n"
                     "int(df[df.n % 2 == 0].n.sum())", "30"),
    "zoneinfo": ("from zoneinfo import ZoneInfo\nfrom datetime import datetime\n"
                 "datetime(2024, 7, 1, tzinfo=ZoneInfo('Europe/Paris')).utcoffset().seconds",
                 "7200"),
    "recursion_limit": ("import sys\nsys.setrecursionlimit(10000)\n"
                        "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nf(5000)", "5000"),
    # memoised recursion 50,000 deep through lru_cache's C wrapper: crashed the worker (C
    # stack overflow) with the default 8 MB stack
    "deep_memoised_recursion": ("from functools import lru_cache\nimport sys\n"
                                "sys.setrecursionlimit(10**6)\n@lru_cache(None)\n"
                                "def f(n):\n    return 0 if n == 0 else f(n - 1) + 1\nf(50000)",
                                "50000"),
    "exit_after_output": ("print(7)\nimport sys\nsys.exit(0)", None),
    "int_digits_limit": ("import sys\nsys.set_int_max_str_digits(0)\nlen(str(3 ** 20000))",
                         "9543"),
    # Python's 4,300-digit limit is lifted: the timeout bounds the conversion's cost
    "big_int_to_text": ("import math\nlen(str(math.factorial(3000)))", "9131"),
    "big_int_printed": ("print(2 ** 20000 % 10 ** 6, len(str(2 ** 20000)))\nNone", None),
    "hashlib_struct": ("import hashlib, struct\n"
                       "hashlib.md5(struct.pack('>I', 7)).hexdigest()[:6]",
                       "'" + __import__("hashlib").md5(b"\0\0\0\x07").hexdigest()[:6] + "'"),
    "sympy_star_import": ("from sympy import *\nx = symbols('x')\nsolve(x**2 - 5*x + 6, x)",
                          "[2, 3]"),
}


@pytest.mark.parametrize("code, expected", list(CELLS.values()), ids=list(CELLS))
def test_real_model_cell_runs(sandbox: Sandbox, code: str, expected: str | None) -> None:
    r = sandbox.run(code)
    assert r.ok and r.value == expected, r


def test_plotting_runs_and_writes_nothing(sandbox: Sandbox) -> None:
    with sandbox.session() as s:
        r = s.run("import matplotlib.pyplot as plt\nimport numpy as np\n"
                  "x = np.linspace(-2, 2, 100)\nplt.plot(x, x**2, label='y')\nplt.legend()\n"
                  "plt.title('parabola')\nplt.grid(True)\nplt.show()\nprint('plotted')")
        assert r.ok and r.stdout == "plotted\n" and r.stderr == "", r
        r = s.run("import io\nbuf = io.BytesIO()\nplt.savefig(buf, format='png')\n"
                  "buf.getvalue()[:4]")
        assert r.ok and r.value == "b'\\x89PNG'", r
        r = s.run("plt.savefig('figure.png')")
        assert r.error_type in ("PermissionError", "OSError"), r  # nothing is written
        assert s.run("plt.close('all')\n1").value == "1"


# Notebook habits (agentmath/sandbox/notebook.py): a shell or magic line used to fail the whole
# cell with a SyntaxError, losing every line that would have run.
NOTEBOOK_CELLS = {
    "pip_then_code": ("!pip install sympy\nimport sympy\nprint(sympy.isprime(97))", "True\n",
                      ["!pip install sympy"]),
    "magics_in_a_block": ("%matplotlib inline\nfor i in range(2):\n    %time x = i\n"
                          "    print(i)", "0\n1\n", ["%matplotlib inline", "%time x = i"]),
    "cell_magic": ("%%time\ns = sum(range(10))\nprint(s)", "45\n", ["%%time"]),
}


@pytest.mark.parametrize("code, stdout, skipped", list(NOTEBOOK_CELLS.values()),
                         ids=list(NOTEBOOK_CELLS))
def test_notebook_command_lines_are_skipped_and_the_rest_runs(
        sandbox: Sandbox, code: str, stdout: str, skipped: list[str]) -> None:
    r = sandbox.run(code)
    assert r.ok and r.stdout == stdout, r
    assert r.stderr.startswith(f"[sandbox] skipped {len(skipped)} notebook command line(s): "
                               + "; ".join(skipped)), r.stderr


def test_a_cell_that_parses_is_never_changed_and_real_syntax_errors_stay(
        sandbox: Sandbox) -> None:
    # '%' and '!' inside valid Python keep their meaning
    r = sandbox.run("x = (10\n% 3)\ns = '''\n!not a command\n'''\nx, s.strip()")
    assert r.ok and r.value == "(1, '!not a command')" and r.stderr == "", r
    # a cell with a real syntax error reports it (line 2), not the command line
    r = sandbox.run("!pip install numpy\nprint(1 +)")
    assert r.error_type == "SyntaxError" and r.error_line == 2, r


def test_display_prints_each_object(sandbox: Sandbox) -> None:
    with sandbox.session() as s:
        r = s.run("import sympy as sp\nx = sp.Symbol('x')\ndisplay(sp.expand((x + 1)**2), "
                  "'done')")
        assert r.ok and r.stdout == "x**2 + 2*x + 1\n'done'\n" and r.value is None, r
        r = s.run("import pandas as pd\ndisplay(pd.DataFrame({'n': [1, 2]}))")
        assert r.ok and r.stdout == "   n\n0  1\n1  2\n", r


IPYTHON_CELLS = [  # (cell, stdout, value), run in turn in one session
    ("from IPython.display import display, Math, Latex\nimport sympy as sp\n"
     "x = sp.Symbol('x')\ndisplay(Math(sp.latex(sp.integrate(x**2, x))))\nLatex(r'\\frac{1}{2}')",
     "$\\frac{x^{3}}{3}$\n", "\\frac{1}{2}"),
    ("import IPython\nIPython.display.display(IPython.display.Markdown('**a**'))",
     "**a**\n", None),
    ("from IPython.display import *\nclear_output()\nHTML('<b>b</b>')", "", "<b>b</b>"),
]


def test_ipython_display_imports_get_a_text_stand_in(sandbox: Sandbox) -> None:
    with sandbox.session() as s:
        for code, stdout, value in IPYTHON_CELLS:
            r = s.run(code)
            assert (r.ok, r.stdout, r.value) == (True, stdout, value), r
        r = s.run("import IPython.core")  # only the display module stands in
        assert r.error_type == "ImportError" and "IPython.core" in r.error, r
