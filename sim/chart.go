package sim

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// chartSpec is one line chart of the HTML report: a series per variant,
// named in its legend, on two axes with ticks.
type chartSpec struct {
	names  []string
	series [][]pt
	x, y   axis
}

// axis is one axis: values run from 0 to max; ticks are at positions in
// the same units.
type axis struct {
	max   float64
	label string
	ticks []tick
}

type tick struct {
	at   float64
	text string
}

func fmtTick(v float64) string    { return strconv.FormatFloat(v, 'f', -1, 64) }
func fmtPctTick(v float64) string { return strconv.FormatFloat(100*v, 'f', 0, 64) + "%" }

// linearAxis is an axis from 0 to max with ticks at a round step (1, 2 or
// 5 times a power of ten), four to ten of them.
func linearAxis(max float64, label string, format func(float64) string) axis {
	if max <= 0 {
		max = 1
	}
	raw := max / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; max/step <= 6 {
			break
		}
	}
	a := axis{max: max, label: label}
	for i := 0; ; i++ {
		v := float64(i) * step
		if v > max*(1+1e-9) {
			break
		}
		a.ticks = append(a.ticks, tick{v, format(math.Round(v/mag*1e6) / 1e6 * mag)})
	}
	return a
}

// logAxis is the wait axis of [logx]: 0 to 1, a tick per decade of
// seconds from 10 ms to maxW.
func logAxis(maxW float64, label string) axis {
	a := axis{max: 1, label: label + " (log scale)"}
	for e := -2; math.Pow(10, float64(e)) <= maxW*(1+1e-9); e++ {
		v := math.Pow(10, float64(e))
		text := strconv.FormatFloat(v, 'f', -1, 64) + " s"
		switch {
		case v >= 3600:
			text = strconv.FormatFloat(v/3600, 'f', -1, 64) + " h"
		case v >= 60:
			text = strconv.FormatFloat(v/60, 'f', 1, 64) + " min"
		}
		a.ticks = append(a.ticks, tick{logx(v, maxW), text})
	}
	return a
}

// Chart geometry, in SVG units: the drawing scales to the page's width.
const (
	chartW, chartH           = 1000.0, 280.0
	plotL, plotR, plotT      = 60.0, 15.0, 10.0
	plotB                    = 45.0
	plotW, plotH             = chartW - plotL - plotR, chartH - plotT - plotB
	legendSampleW, legendLen = 36, 30
)

func (a axis) pos(v float64, length float64) float64 {
	return length * min(max(v/a.max, 0), 1)
}

// write draws the chart (SVG) and its legend (a line sample per name).
func (c chartSpec) write(b *strings.Builder) {
	fmt.Fprintf(b, "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n", chartW, chartH)
	for _, t := range c.y.ticks {
		y := plotT + plotH - c.y.pos(t.at, plotH)
		fmt.Fprintf(b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#eee\"/>"+
			"<text class=\"yt\" x=\"%.0f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
			plotL, y, plotL+plotW, y, plotL-6, y+4, html.EscapeString(t.text))
	}
	for _, t := range c.x.ticks {
		x := plotL + c.x.pos(t.at, plotW)
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#999\"/>"+
			"<text class=\"xt\" x=\"%.1f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
			x, plotT+plotH, x, plotT+plotH+5, x, plotT+plotH+18, html.EscapeString(t.text))
	}
	fmt.Fprintf(b, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#999\"/>"+
		"<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#999\"/>\n",
		plotL, plotT, plotL, plotT+plotH, plotL, plotT+plotH, plotL+plotW, plotT+plotH)
	fmt.Fprintf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\" text-anchor=\"middle\">%s</text>"+
		"<text x=\"12\" y=\"%.0f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 12 %.0f)\">%s</text>\n",
		plotL+plotW/2, chartH-6, html.EscapeString(c.x.label), plotT+plotH/2, plotT+plotH/2, html.EscapeString(c.y.label))
	for i, ser := range c.series {
		if len(ser) == 0 {
			continue
		}
		var p strings.Builder
		for k, q := range ser {
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&p, "%s%.1f %.1f", cmd, plotL+c.x.pos(q.x, plotW), plotT+plotH-c.y.pos(q.y, plotH))
		}
		colour, dash := lineStyle(i)
		fmt.Fprintf(b, "<path class=\"series\" d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"%s/>\n", p.String(), colour, dashAttr(dash))
	}
	b.WriteString("</svg>\n<p class=\"lg\">")
	for i, n := range c.names {
		colour, dash := lineStyle(i)
		fmt.Fprintf(b, "<span><svg width=\"%d\" height=\"10\"><line x1=\"0\" y1=\"5\" x2=\"%d\" y2=\"5\" stroke=\"%s\" stroke-width=\"2\"%s/></svg>%s</span>",
			legendSampleW, legendLen, colour, dashAttr(dash), html.EscapeString(n))
	}
	b.WriteString("</p>\n")
}

func dashAttr(dash string) string {
	if dash == "" {
		return ""
	}
	return " stroke-dasharray=\"" + dash + "\""
}
