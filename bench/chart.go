package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The chart is hand-written SVG: four panels, no plotting dependency.

const (
	panelW, panelH = 480.0, 300.0
	colorCapstan   = "#2563eb"
	colorBare      = "#9ca3af"
	colorOff       = "#dc2626"
	colorOn        = "#16a34a"
)

type series struct {
	name   string
	color  string
	values []float64 // NaN: no value
}

func (r *results) svg() string {
	var w strings.Builder
	width, height := 2*panelW+30, 2*panelH+70
	fmt.Fprintf(&w, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&w, `<text x="10" y="22" font-size="15" font-weight="bold">capstan vs bare Temporal — %s</text>`+"\n",
		html.EscapeString(r.started.UTC().Format("2006-01-02")))
	fmt.Fprintf(&w, `<text x="10" y="40" fill="#555">%s</text>`+"\n", html.EscapeString(r.subtitle()))

	var groups []string
	var thr, lat [2][]float64
	for _, workers := range []int{1, 2} {
		for _, plan := range loadPlan {
			c, b := r.cell(kindCapstan, workers, plan.n), r.cell(kindBare, workers, plan.n)
			if c == nil || b == nil {
				continue
			}
			groups = append(groups, fmt.Sprintf("%dw N=%d", workers, plan.n))
			thr[0], thr[1] = append(thr[0], c.throughput()), append(thr[1], b.throughput())
			lat[0], lat[1] = append(lat[0], p50ms(c)), append(lat[1], p50ms(b))
		}
	}
	barPanel(&w, 10, 55, "Throughput (tasks/s, higher is better)", groups, []series{
		{"capstan", colorCapstan, thr[0]}, {"bare", colorBare, thr[1]}}, "%.2f", math.NaN())
	barPanel(&w, 20+panelW, 55, "p50 task latency (ms, lower is better)", groups, []series{
		{"capstan", colorCapstan, lat[0]}, {"bare", colorBare, lat[1]}}, "%.0f", math.NaN())

	var hg []string
	var hc, hb []float64
	for _, turns := range historyTurns {
		c, b := math.NaN(), math.NaN()
		for _, h := range r.history {
			if h.turns != turns || h.err != nil {
				continue
			}
			if h.kind == kindCapstan {
				c = h.perTurn() / 1024
			} else {
				b = h.perTurn() / 1024
			}
		}
		hg = append(hg, turnsLabel(turns))
		hc, hb = append(hc, c), append(hb, b)
	}
	if r.long.err == nil && r.long.bytes > 0 {
		hg = append(hg, turnsLabel(r.long.turns))
		hc, hb = append(hc, r.long.perTurn()/1024), append(hb, math.NaN())
	}
	barPanel(&w, 10, 65+panelH, "History per turn (KB; target ≤ 5 KB, dashed)", hg, []series{
		{"capstan", colorCapstan, hc}, {"bare", colorBare, hb}}, "%.1f", maxBytesPerTurn/1024)

	var os []series
	var notes []string
	for _, o := range r.outage {
		switch {
		case o.notBuilt:
			notes = append(notes, "breakers on: not built yet")
		case o.err != nil:
			notes = append(notes, fmt.Sprintf("breakers %s: failed", onOff(o.breakers)))
		default:
			color := colorOff
			if o.breakers {
				color = colorOn
			}
			vals := make([]float64, len(o.perSecond))
			for i, v := range o.perSecond {
				vals[i] = float64(v)
			}
			os = append(os, series{fmt.Sprintf("breakers %s: %d requests", onOff(o.breakers), o.requests), color, vals})
		}
	}
	linePanel(&w, 20+panelW, 65+panelH, fmt.Sprintf("Requests/s to the downed model provider (%s outage)", outageLengthRun), os, notes)
	w.WriteString("</svg>\n")
	return w.String()
}

func (r *results) subtitle() string {
	s := fmt.Sprintf("demo task (4 turns, 3 GitHub writes, 1 Slack post); dev server, sandbox and workers on one machine, load average %s→%s", r.loadBefore, r.loadAfter)
	if r.quick {
		s += "; -quick run, not comparable"
	}
	return s
}

// niceMax rounds v up to 1, 2 or 5 times a power of ten, for the axis.
func niceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// frame draws a panel's title and axes and returns the plot area.
func frame(w *strings.Builder, x, y float64, title string, top float64) (px, py, pw, ph float64) {
	px, py, pw, ph = x+45, y+30, panelW-60, panelH-75
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", x, y+14, html.EscapeString(title))
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		ty := py + ph - ph*float64(i)/4
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e7eb"/>`+"\n", px, ty, px+pw, ty)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", px-4, ty+4, trimNum(v))
	}
	fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", px, py+ph, px+pw, py+ph)
	return px, py, pw, ph
}

func trimNum(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func legend(w *strings.Builder, x, y float64, ss []series) {
	for i, s := range ss {
		lx := x + float64(i)*170
		fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/>`+"\n", lx, y-9, s.color)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+14, y, html.EscapeString(s.name))
	}
}

// barPanel draws grouped bars, one group per label, one bar per series.
// A target other than NaN is drawn as a dashed line.
func barPanel(w *strings.Builder, x, y float64, title string, groups []string, ss []series, valueFormat string, target float64) {
	top := 0.0
	for _, s := range ss {
		for _, v := range s.values {
			if !math.IsNaN(v) {
				top = math.Max(top, v)
			}
		}
	}
	top = niceMax(top)
	px, py, pw, ph := frame(w, x, y, title, top)
	if len(groups) == 0 {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" fill="#555">not measured</text>`+"\n", px+10, py+ph/2)
		return
	}
	gw := pw / float64(len(groups))
	bw := gw * 0.8 / float64(len(ss))
	for g, label := range groups {
		gx := px + float64(g)*gw + gw*0.1
		for i, s := range ss {
			if g >= len(s.values) || math.IsNaN(s.values[g]) {
				continue
			}
			v := s.values[g]
			h := ph * v / top
			bx := gx + float64(i)*bw
			fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				bx, py+ph-h, bw-1, h, s.color, html.EscapeString(s.name), html.EscapeString(label), fmt.Sprintf(valueFormat, v))
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>`+"\n", bx+bw/2, py+ph-h-3, fmt.Sprintf(valueFormat, v))
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px+float64(g)*gw+gw/2, py+ph+15, html.EscapeString(label))
	}
	if !math.IsNaN(target) && target <= top {
		ty := py + ph - ph*target/top
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#dc2626" stroke-dasharray="6 4"/>`+"\n", px, ty, px+pw, ty)
	}
	legend(w, px, py+ph+38, ss)
}

func turnsLabel(n int) string {
	if n == 1 {
		return "1 turn"
	}
	return fmt.Sprintf("%d turns", n)
}

// linePanel draws one line per series over seconds.
func linePanel(w *strings.Builder, x, y float64, title string, ss []series, notes []string) {
	top, n := 0.0, 0
	for _, s := range ss {
		n = max(n, len(s.values))
		for _, v := range s.values {
			top = math.Max(top, v)
		}
	}
	top = niceMax(top)
	px, py, pw, ph := frame(w, x, y, title, top)
	n = max(n, int(outageLengthRun.Seconds()))
	for i := 0; i <= n; i += 5 {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%d s</text>`+"\n", px+pw*float64(i)/float64(n), py+ph+15, i)
	}
	for _, s := range ss {
		var pts []string
		for i, v := range s.values {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px+pw*(float64(i)+0.5)/float64(n), py+ph-ph*v/top))
		}
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		for i, pt := range pts {
			xy := strings.Split(pt, ",")
			fmt.Fprintf(w, `<circle cx="%s" cy="%s" r="2.5" fill="%s"><title>%s, second %d: %.0f</title></circle>`+"\n",
				xy[0], xy[1], s.color, html.EscapeString(s.name), i, s.values[i])
		}
	}
	legend(w, px, py+ph+38, ss)
	for i, note := range notes {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" fill="#555">%s</text>`+"\n", px+10, py+16+float64(i)*14, html.EscapeString(note))
	}
}
