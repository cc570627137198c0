# unihost guest: kernel command line parser (busybox awk).
#
# Input: /proc/cmdline. Tokenizes exactly like Unikraft's ukargparse
# (uk_argnparse): whitespace (space, \t, \n, \r, \v) separates words unless
# inside quotes; ' and " both quote, may start/stop anywhere inside a word and
# are removed; there are no backslash escapes; an empty quoted word ("") yields
# no word at all.
#
# The first word that is exactly `--` (unquoted) separates kernel/platform
# parameters from application arguments.
#
# With -v out=DIR, N/E/F/A values are also written, one per line, to
# DIR/netdev, DIR/env, DIR/fstab and DIR/args (all four files are created).
#
# Output, one record per line, "<type>\t<value>":
#   K <word>           kernel word we don't interpret (ignored by init)
#   N <value>          one netdev.ip value (array items yield several N)
#   E <K=V>            one env.vars item
#   F <entry>          one vfs.fstab item
#   X <key>=<value>    a unihost.* parameter (guest-side knobs)
#   A <word>           one application argument (after `--`)
#   S 1                a `--` separator was present
#   W <message>        parse warning (unterminated quote / array)
function flush() {
	if (have) { n++; tok[n] = cur; msk[n] = mask }
	cur = ""; mask = ""; have = 0
}
function unq(t, k) { return substr(msk[t], k, 1) == "u" }
function emit(type, v, f) {
	gsub(/[\n\t]/, " ", v); print type "\t" v
	if (out != "" && (f = files[type]) != "") print v > (out "/" f)
}
function known(name) {
	return name == "netdev.ip" || name == "env.vars" || name == "vfs.fstab"
}
function typ(name) {
	if (name == "netdev.ip") return "N"
	if (name == "env.vars") return "E"
	return "F"
}
{ line = line $0 "\n" }
END {
	files["N"] = "netdev"; files["E"] = "env"; files["F"] = "fstab"; files["A"] = "args"
	if (out != "") for (k in files) printf "" > (out "/" files[k])
	n = 0; cur = ""; mask = ""; have = 0; q = ""
	L = length(line)
	for (i = 1; i <= L; i++) {
		c = substr(line, i, 1)
		if (q == "" && (c == " " || c == "\t" || c == "\n" || c == "\r" || c == "\v")) { flush(); continue }
		if (c == "\"" || c == "'") {
			if (q == "") { q = c; continue }
			if (q == c) { q = ""; continue }
		}
		cur = cur c; mask = mask (q == "" ? "u" : "q"); have = 1
	}
	if (q != "") emit("W", "unterminated quote")
	flush()

	app = 0; arr = ""
	for (t = 1; t <= n; t++) {
		w = tok[t]
		if (app) { emit("A", w); continue }
		if (w == "--" && msk[t] == "uu") {
			if (arr != "") { emit("W", "unterminated array " arr); arr = "" }
			app = 1; emit("S", "1"); continue
		}
		if (arr != "") {
			# inside name=[ ... ]: items until an unquoted ]
			lw = length(w); closing = 0
			if (lw > 0 && substr(w, lw, 1) == "]" && unq(t, lw)) { closing = 1; w = substr(w, 1, lw - 1) }
			if (w != "") emit(typ(arr), w)
			if (closing) arr = ""
			continue
		}
		eq = index(w, "=")
		if (eq > 1) {
			name = substr(w, 1, eq - 1); val = substr(w, eq + 1)
			if (known(name)) {
				if (substr(val, 1, 1) == "[" && unq(t, eq + 1)) {
					val = substr(val, 2); lv = length(val)
					if (lv > 0 && substr(val, lv, 1) == "]" && unq(t, length(w))) {
						val = substr(val, 1, lv - 1); if (val != "") emit(typ(name), val); continue
					}
					arr = name
					if (val != "") emit(typ(name), val)
					continue
				}
				emit(typ(name), val); continue
			}
			if (substr(name, 1, 8) == "unihost.") { emit("X", w); continue }
		}
		emit("K", w)
	}
	if (arr != "") emit("W", "unterminated array " arr)
}
