package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writeOutputs writes the CSV, the Markdown tables and the plots, and
// prints the checks of the acceptance criteria.
func writeOutputs(o options, results []result, start time.Time) error {
	name := "results"
	if o.quick {
		name = "quick"
	}
	if err := writeCSV(filepath.Join(o.out, name+".csv"), results, !o.quick); err != nil {
		return err
	}
	checks := acceptance(results)
	md := markdown(results, checks, time.Since(start), o.quick)
	if err := os.WriteFile(filepath.Join(o.out, name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	// The slow-node lab's runs are a table of their own, not a point on
	// the node-count curves.
	matrixRuns := filterResults(results, func(r result) bool { return r.slowMbit == 0 && !r.late && !r.lateBase && r.trunkMbit == 0 })
	for _, mbit := range []float64{100, 1000} {
		if err := plotPerNode(filepath.Join(o.out, fmt.Sprintf("%s-per-node-%vmbit.png", name, mbit)), matrixRuns, mbit); err != nil {
			return err
		}
	}
	if err := plotPrediction(filepath.Join(o.out, name+"-predicted-vs-measured.png"), results); err != nil {
		return err
	}
	fmt.Println()
	for _, c := range checks {
		fmt.Println(c)
	}
	fmt.Printf("labbench: wrote %s/%s.csv, %s.md and plots in %s\n", o.out, name, name, time.Since(start).Round(time.Second))
	return nil
}

// writeCSV writes a row per run; withImage adds the image's size in MiB
// (the full matrix casts three images; the quick one, one).
func writeCSV(path string, results []result, withImage bool) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	header := []string{"method", "topology", "fanout", "compression", "nodes", "link_mbit", "predicted_mbps", "measured_mbps", "chosen_plan"}
	if withImage {
		header = append(header, "image_mib")
	}
	w.Write(header)
	for _, r := range results {
		if r.err != "" {
			continue
		}
		pred := ""
		if r.predicted > 0 {
			pred = strconv.FormatFloat(r.predicted, 'f', 2, 64)
		}
		row := []string{r.method, r.topology, strconv.Itoa(r.fanout), r.compression, strconv.Itoa(r.nodes),
			strconv.FormatFloat(r.mbit, 'f', -1, 64), pred, strconv.FormatFloat(r.measured, 'f', 2, 64), r.chosen}
		if withImage {
			row = append(row, strconv.FormatInt(imageSpecs[r.image].Size>>20, 10))
		}
		w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func shapeName(r runSpec) string {
	switch r.topology {
	case "tree":
		return fmt.Sprintf("%d-tree", r.fanout)
	case "star":
		return "star"
	}
	return r.topology
}

// series names the line a result belongs to in the plots.
func series(r runSpec) string {
	if r.method != "dolly" {
		return r.method
	}
	s := "dolly " + shapeName(r)
	if r.compression != "none" {
		s += " " + r.compression
	}
	return s
}

// seriesOn is series for a table or plot of runs on image: a run on
// another image is a series of its own, since the start-up weighs
// differently on it.
func seriesOn(r runSpec, image string) string {
	if r.image == image {
		return series(r)
	}
	return fmt.Sprintf("%s (%d MiB image)", series(r), imageSpecs[r.image].Size>>20)
}

func markdown(results []result, checks []string, took time.Duration, quick bool) string {
	var b strings.Builder
	title := "full matrix"
	if quick {
		title = "quick subset"
	}
	fmt.Fprintf(&b, "# dolly lab benchmark (%s)\n\n", title)
	fmt.Fprintf(&b, "Hosts in network namespaces on a Linux bridge, every link shaped with tc (HTB) in both directions, loop devices as disks, all on one %d-core machine. MB/s is image bytes (10^6) over the slowest node's time; *predicted* is image bytes over the time dolly-server's capacity model previewed for the plan (its ETA: the steady rate *b*, the pipeline fill and the start-up), from what the server and the nodes measured of themselves and of the network, with no topology file; *b* is the steady rate alone. An *auto* row is the plan the model chose for the raw image (shown after the arrow). *Stolen cores* is what the hypervisor took from the machine over the run. Took %s.\n\n", cores(), took.Round(time.Second))
	if !quick {
		fmt.Fprintf(&b, "A dolly run shorter than %v is cast up to three times (five under %v; once from %v on when links alone hold it back), until two casts agree within %.0f%% in rate and prediction, and the medians kept: *casts* lists the measured and predicted rate of each (the server times the image's decoding for each prediction, on the same shared machine).\n\n", repeatUnder, repeatMoreUnder, linkBoundOnceFrom, castsAgree*100)
	}
	headline := filterResults(results, func(r result) bool { return r.headline })
	if len(headline) > 0 {
		nodes := slices.MaxFunc(headline, func(a, b result) int { return a.nodes - b.nodes }).nodes
		fmt.Fprintf(&b, "## Headline: %d nodes, %v Mbit/s, %s image\n\n", nodes, headline[0].mbit, imageLabel(headline[0].image))
		b.WriteString("| method | time | MB/s per node |\n|---|---|---|\n")
		for _, r := range headline {
			name := series(r.runSpec)
			if r.nodes != nodes {
				name += fmt.Sprintf(" (%d node, for reference)", r.nodes)
			}
			if r.image != headline[0].image {
				name += fmt.Sprintf(" (%s image)", imageLabel(r.image))
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", name, cell(r, fmt.Sprintf("%.1f s", r.seconds)), cell(r, fmt.Sprintf("%.2f", r.measured)))
		}
		b.WriteString("\n")
	}
	for _, mbit := range []float64{100, 1000} {
		rows := filterResults(results, func(r result) bool {
			return r.mbit == mbit && !r.headline && r.slowMbit == 0 && !r.late && !r.lateBase && r.trunkMbit == 0 && !dirtyImage(r.image)
		})
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %v Mbit/s links (%s image)\n\n", mbit, imageLabel(rows[0].image))
		b.WriteString("| method | nodes | time | measured MB/s | predicted MB/s | error | b MB/s | bottleneck | casts MB/s (predicted) | stolen cores |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range rows {
			pred, errPct, rate := "", "", ""
			if r.predicted > 0 && r.err == "" {
				pred, errPct, rate = fmt.Sprintf("%.2f", r.predicted), fmt.Sprintf("%+.1f%%", r.errorPercent()), fmt.Sprintf("%.2f", r.rate)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %.2f |\n", seriesOn(r.runSpec, rows[0].image), r.nodes,
				cell(r, fmt.Sprintf("%.1f s", r.seconds)), cell(r, fmt.Sprintf("%.2f", r.measured)), pred, errPct, rate, r.bottleneck,
				castsCell(r), r.steal)
		}
		b.WriteString("\n")
	}
	scenarioTables(&b, results)
	b.WriteString("## Checks\n\n")
	for _, c := range checks {
		fmt.Fprintf(&b, "- %s\n", c)
	}
	return b.String()
}

func cell(r result, s string) string {
	if r.err != "" {
		return "failed: " + r.err
	}
	return s
}

func imageLabel(name string) string {
	s := imageSpecs[name]
	return fmt.Sprintf("%d MiB %s holding %d MiB of files", s.Size>>20, fsName(name), s.Files>>20)
}

// fsName is the file system of a bench image.
func fsName(name string) string {
	switch fs := imageSpecs[name].FS; fs {
	case "", "ext4":
		return "ext4"
	case "ntfs":
		return "NTFS"
	default:
		return strings.ToUpper(fs)
	}
}

func cores() int { return runtime.NumCPU() }

func filterResults(rs []result, keep func(result) bool) []result {
	var out []result
	for _, r := range rs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// plotPerNode draws MB/s per node against the node count, a line per method.
func plotPerNode(path string, results []result, mbit float64) error {
	rows := filterResults(results, func(r result) bool { return r.mbit == mbit && !r.headline && r.err == "" })
	if len(rows) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("MB/s per node against nodes, %v Mbit/s links", mbit)
	p.X.Label.Text = "nodes"
	p.Y.Label.Text = "MB/s of image per node (log scale)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	// A tick at each node count of the runs, not at round numbers.
	var counts []int
	for _, r := range rows {
		if !slices.Contains(counts, r.nodes) {
			counts = append(counts, r.nodes)
		}
	}
	slices.Sort(counts)
	var ticks plot.ConstantTicks
	for _, n := range counts {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: fmt.Sprint(n)})
	}
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = float64(counts[0])-0.5, float64(counts[len(counts)-1])+0.5
	var names []string
	lines := map[string]plotter.XYs{}
	for _, r := range rows {
		s := seriesOn(r.runSpec, rows[0].image)
		if _, ok := lines[s]; !ok {
			names = append(names, s)
		}
		lines[s] = append(lines[s], plotter.XY{X: float64(r.nodes), Y: r.measured})
	}
	var args []any
	for _, n := range names {
		xy := lines[n]
		slices.SortFunc(xy, func(a, b plotter.XY) int { return int(a.X - b.X) })
		args = append(args, n, xy)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	// A dozen series and more: the legend goes beside the plot, where it
	// covers no line.
	legend := p.Legend
	p.Legend = plot.NewLegend()
	legend.Top, legend.Left = true, true
	const width, height, legendWidth = 10.5 * vg.Inch, 5 * vg.Inch, 3 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	legend.Draw(draw.Crop(dc, width-legendWidth+vg.Points(6), 0, 0, -vg.Points(24)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// plotPrediction draws predicted against measured MB/s for dolly's runs.
func plotPrediction(path string, results []result) error {
	var pts plotter.XYs
	lo, hi := math.Inf(1), 1.0
	for _, r := range results {
		if r.method == "dolly" && r.err == "" && r.predicted > 0 {
			pts = append(pts, plotter.XY{X: r.measured, Y: r.predicted})
			lo, hi = min(lo, r.measured, r.predicted), max(hi, r.measured, r.predicted)
		}
	}
	if len(pts) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "capacity model: predicted against measured (dolly)"
	p.X.Label.Text = "measured MB/s (log scale)"
	p.Y.Label.Text = "predicted MB/s (log scale)"
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	ideal := plotter.NewFunction(func(x float64) float64 { return x })
	ideal.Color = color.Gray{128}
	band := func(f float64) *plotter.Function {
		fn := plotter.NewFunction(func(x float64) float64 { return x * f })
		fn.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		fn.Color = color.Gray{180}
		return fn
	}
	p.Add(s, ideal, band(1.15), band(0.85))
	p.Legend.Add("runs", s)
	p.Legend.Add("equal", ideal)
	p.Legend.Add("±15%", band(1.15))
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Min, p.Y.Min, p.X.Max, p.Y.Max = lo/1.2, lo/1.2, hi*1.2, hi*1.2
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	return p.Save(6*vg.Inch, 6*vg.Inch, path)
}

// castsCell lists each cast's measured rate and, in brackets, its
// prediction.
func castsCell(r result) string {
	var b strings.Builder
	for i, m := range r.casts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.2f", m)
		if i < len(r.castsPredicted) && r.castsPredicted[i] > 0 {
			fmt.Fprintf(&b, " (%.2f)", r.castsPredicted[i])
		}
	}
	return b.String()
}
