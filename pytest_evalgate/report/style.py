"""report.html's style sheet: system fonts; slices as a grid of columns on a wide screen and as
label/value cards below 60rem (a narrow window, a printed page); on a phone tables become cards
too and figures scroll in their own box; print rules (no backgrounds, rows kept whole). Inline in
the page; nothing is fetched."""

from __future__ import annotations

EVALGATE_REPORT_CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--soft:#f6f8fa;
--pass:#1a7f37;--fail:#cf222e;--warn:#9a6700;color-scheme:light}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--fg);line-height:1.45;
font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
overflow-wrap:anywhere}
main,header.verdict,footer{max-width:72rem;margin:0 auto;padding:0 1rem}
header.verdict{margin-top:1rem;padding:1rem;border-left:.5rem solid var(--warn);
background:var(--soft);border-radius:.4rem}
header.verdict.v-pass{border-color:var(--pass)}header.verdict.v-fail{border-color:var(--fail)}
.eyebrow{margin:0;color:var(--muted);font-size:.85rem}
h1{margin:.2rem 0;font-size:1.7rem}h2{font-size:1.25rem;margin:2rem 0 .6rem;
border-bottom:1px solid var(--line);padding-bottom:.3rem}h3{font-size:1.05rem}
.why{margin:.3rem 0 0;font-size:1.05rem}
code{font:.86em/1.3 ui-monospace,"DejaVu Sans Mono",monospace;background:var(--soft);
padding:0 .2em;border-radius:.2em;overflow-wrap:break-word}
code.h{word-break:break-all}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--soft);font-weight:600}
th,.slice-head span{overflow-wrap:normal;word-break:normal}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{color:var(--pass);font-weight:600}.fail{color:var(--fail);font-weight:600}
.facts{padding-left:1.1rem}.facts li{margin:.15rem 0}
.slices{border-top:1px solid var(--line);font-size:.9rem}
.slice-head,.slice>summary{display:grid;gap:.4rem;padding:.4rem .5rem;
grid-template-columns:minmax(6rem,1.3fr) 3rem repeat(2,minmax(6.5rem,1.3fr)) 4.8rem
minmax(9rem,1.5fr) 5.6rem minmax(4rem,1fr) 5.5rem;border-bottom:1px solid var(--line)}
.slice-head{background:var(--soft);font-weight:600}
.slice>summary{cursor:pointer;list-style:none}
.slice>summary::-webkit-details-marker{display:none}
.slice>summary .c-name::before{content:"\\25B8\\00A0";color:var(--muted)}
.slice[open]>summary .c-name::before{content:"\\25BE\\00A0"}
.slice[open]>summary{background:var(--soft)}
.cell.num{text-align:right;font-variant-numeric:tabular-nums}
.cell .label{display:none}
.flips{padding:.5rem 1rem .8rem 1.6rem;border-bottom:1px solid var(--line)}
.flips p{margin:.3rem 0}.flips code{display:inline-block;margin:0 .15rem .15rem 0}
.case-text{margin:.4rem 0;padding:.4rem .6rem;background:var(--soft);border-radius:.3rem}
.case-text dt{font-weight:600}.case-text dd{margin:0 0 .3rem;white-space:pre-wrap}
figure{margin:0}.plot{overflow-x:auto}
.plot svg{display:block;width:100%;height:auto;max-width:52rem}
figcaption{color:var(--muted);font-size:.85rem}
.changed{font-weight:600;white-space:nowrap}
footer{color:var(--muted);font-size:.85rem;margin:2.5rem auto 1.5rem}
@media (max-width:60rem){
.slice-head{display:none}
.slice>summary{grid-template-columns:repeat(3,minmax(0,1fr));row-gap:.15rem;grid-auto-flow:dense}
.slice>summary .c-name{grid-column:1/-1;font-weight:600}
.cell .label{display:inline;color:var(--muted);margin-right:.35rem;font-weight:400}
.cell.num{text-align:left}
}
@media (max-width:44rem){
body{font-size:14px}h1{font-size:1.4rem}
.slice>summary{grid-template-columns:repeat(2,minmax(0,1fr))}
.slice>summary .c-baseline,.slice>summary .c-candidate,.slice>summary .c-interval,
.slice>summary .c-flips{grid-column:1/-1}
.plot svg{min-width:34rem}
table.stack thead{display:none}
table.stack,table.stack tbody,table.stack tr{display:block;width:100%}
table.stack tr{border-bottom:2px solid var(--line);padding:.3rem 0}
table.stack td{display:flex;gap:.5rem;width:100%;border:0;padding:.1rem .3rem;text-align:left;
white-space:normal}
table.stack td::before{content:attr(data-label);color:var(--muted);flex:0 0 6.5rem}
table.stack td>.v{min-width:0}
}
@media print{
@page{margin:14mm}
body{font-size:10pt;color:#000;background:#fff}
header.verdict{background:none;border:2px solid #000;border-left-width:.5rem}
h2{break-after:avoid}tr,.slice>summary,figure,.case-text{break-inside:avoid}
.slice>summary .c-name::before{content:""}
.plot{overflow:visible}.plot svg{min-width:0}
code{background:none}
footer{margin-top:1rem}
}
"""
