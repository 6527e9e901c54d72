// A strict Markdown subset for the agent's replies, built as DOM nodes.
//
// Nothing here parses HTML: text only ever reaches the page through
// textContent and createTextNode, so markup in a reply (a <script>, an <img
// onerror>, a javascript: link) is shown as the characters it is. Links keep
// only http(s) and mailto targets. Supported: paragraphs (single newlines kept
// as line breaks), ATX headings, fenced code blocks (with a copy button),
// bullet and numbered lists (nested by indentation), block quotes, tables,
// horizontal rules, and inline code, **bold**, *italic*, ~~strike~~, links
// and bare URLs. Anything else stays plain text.
"use strict";

(function () {
  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?(.*)$/;
  const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:\s+(.*)|$)/;
  const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
  const SAFE_URL = /^(https?:\/\/|mailto:)/i;

  function el(tag, cls) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    return node;
  }

  // ---- blocks ---------------------------------------------------------------

  function startsBlock(line, next) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
      ITEM.test(line) || isTableStart(line, next);
  }

  function isTableStart(line, next) {
    return line.includes("|") && next !== undefined && next.includes("-") && TABLE_RULE.test(next);
  }

  function cells(line) {
    let row = line.trim();
    if (row.startsWith("|")) row = row.slice(1);
    if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
    return row.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
  }

  function codeBlock(lang, text) {
    const box = el("div", "code");
    const head = el("div", "code-head");
    const label = el("span", "lang");
    label.textContent = lang || "text";
    const copy = el("button", "copy");
    copy.type = "button";
    copy.textContent = "Copy";
    copy.setAttribute("aria-label", "Copy code");
    head.append(label, copy);
    const pre = el("pre");
    const code = el("code");
    code.textContent = text;
    pre.append(code);
    box.append(head, pre);
    return box;
  }

  function list(lines, start, out) {
    const first = ITEM.exec(lines[start]);
    const ordered = /\d/.test(first[2]);
    const indent = first[1].length;
    const node = el(ordered ? "ol" : "ul");
    if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
    let i = start;
    while (i < lines.length) {
      const m = ITEM.exec(lines[i]);
      if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
      const width = m[1].length + m[2].length + 1;
      const body = [m[3] || ""];
      i += 1;
      // The item's own lines: indented past its marker, or lazy continuations.
      while (i < lines.length) {
        const line = lines[i];
        if (line.trim() === "") {
          const after = lines[i + 1];
          if (after !== undefined && (after.match(/^ */)[0].length >= width)) { body.push(""); i += 1; continue; }
          break;
        }
        const lead = line.match(/^ */)[0].length;
        if (lead >= width || (lead > indent && ITEM.test(line))) { body.push(line.slice(Math.min(lead, width))); i += 1; continue; }
        if (ITEM.test(line) || startsBlock(line, lines[i + 1])) break;
        body.push(line.trim());
        i += 1;
      }
      const li = el("li");
      const nested = body.some((line, k) => k > 0 && (ITEM.test(line) || FENCE.test(line)));
      if (nested) blocks(body, li);
      else inline(body.join("\n").trim(), li);
      node.append(li);
      // A blank line between items keeps the list going.
      if (i < lines.length && lines[i].trim() === "" && lines[i + 1] !== undefined) {
        const m2 = ITEM.exec(lines[i + 1]);
        if (m2 && m2[1].length === indent && /\d/.test(m2[2]) === ordered) i += 1;
      }
    }
    out.append(node);
    return i;
  }

  function blocks(lines, out) {
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (line.trim() === "") { i += 1; continue; }
      let m = FENCE.exec(line);
      if (m) {
        const fence = m[1];
        const body = [];
        i += 1;
        // An unclosed fence (a reply still streaming) runs to the end.
        while (i < lines.length && !(lines[i].trim().startsWith(fence) &&
               lines[i].trim().replace(new RegExp("^\\" + fence[0] + "+"), "").trim() === "")) {
          body.push(lines[i]);
          i += 1;
        }
        i += 1;
        out.append(codeBlock(m[2], body.join("\n")));
        continue;
      }
      m = HEADING.exec(line);
      if (m) {
        const h = el("h" + Math.min(6, m[1].length + 2)); // h1/h2 of a reply read as h3/h4
        inline(m[2] || "", h);
        out.append(h);
        i += 1;
        continue;
      }
      if (RULE.test(line)) { out.append(el("hr")); i += 1; continue; }
      if (QUOTE.test(line)) {
        const body = [];
        while (i < lines.length && QUOTE.test(lines[i])) { body.push(QUOTE.exec(lines[i])[1]); i += 1; }
        const quote = el("blockquote");
        blocks(body, quote);
        out.append(quote);
        continue;
      }
      if (ITEM.test(line)) { i = list(lines, i, out); continue; }
      if (isTableStart(line, lines[i + 1])) {
        const table = el("table");
        const head = el("thead");
        const row = el("tr");
        const aligns = cells(lines[i + 1]).map((c) =>
          c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : "");
        cells(line).forEach((text, k) => {
          const th = el("th");
          if (aligns[k]) th.className = "align-" + aligns[k];
          inline(text, th);
          row.append(th);
        });
        head.append(row);
        table.append(head);
        const body = el("tbody");
        i += 2;
        while (i < lines.length && lines[i].includes("|") && lines[i].trim() !== "") {
          const tr = el("tr");
          cells(lines[i]).forEach((text, k) => {
            const td = el("td");
            if (aligns[k]) td.className = "align-" + aligns[k];
            inline(text, td);
            tr.append(td);
          });
          body.append(tr);
          i += 1;
        }
        table.append(body);
        const scroll = el("div", "table");
        scroll.append(table);
        out.append(scroll);
        continue;
      }
      const para = [line.trim()];
      i += 1;
      while (i < lines.length && lines[i].trim() !== "" && !startsBlock(lines[i], lines[i + 1])) {
        para.push(lines[i].trim());
        i += 1;
      }
      const p = el("p");
      inline(para.join("\n"), p);
      out.append(p);
    }
  }

  // ---- inline ---------------------------------------------------------------

  // Each rule: a global regex and how to build its node. The earliest match
  // wins (ties go to the rule listed first); a match found once stays valid
  // while the scan has not passed it, so a long reply is scanned in one pass.
  const RULES = [
    { re: /\\([!-/:-@[-`{-~])/g, make: (m, out) => out.append(m[1]) },
    { re: /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, make: (m, out) => {
      const code = el("code");
      code.textContent = m[2].length > 2 && m[2].startsWith(" ") && m[2].endsWith(" ") ? m[2].slice(1, -1) : m[2];
      out.append(code);
    } },
    { re: /!?\[((?:[^\[\]\\]|\\.){1,500})\]\(\s*<?([^\s()<>]{1,2000})>?(?:\s+"[^"]*")?\s*\)/g, make: (m, out) => {
      if (SAFE_URL.test(m[2])) {
        const a = el("a");
        a.href = m[2];
        a.target = "_blank";
        a.rel = "noopener noreferrer";
        inline(m[1], a);
        out.append(a);
      } else {
        inline(m[1], out); // an unsafe or relative target keeps its text, not its link
      }
    } },
    { re: /\bhttps?:\/\/[^\s<>"'`]+[^\s<>"'`.,;:!?)\]]/g, make: (m, out) => {
      const a = el("a");
      a.href = m[0];
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      a.textContent = m[0];
      out.append(a);
    } },
    { re: /\*\*(?=\S)([\s\S]*?\S)\*\*/g, make: (m, out) => wrap("strong", m[1], out) },
    { re: /(?<![\w])__(?=\S)([\s\S]*?\S)__(?![\w])/g, make: (m, out) => wrap("strong", m[1], out) },
    { re: /\*(?=[^\s*])([\s\S]*?[^\s*])\*/g, make: (m, out) => wrap("em", m[1], out) },
    { re: /(?<![\w])_(?=[^\s_])([\s\S]*?[^\s_])_(?![\w])/g, make: (m, out) => wrap("em", m[1], out) },
    { re: /~~(?=\S)([\s\S]*?\S)~~/g, make: (m, out) => wrap("del", m[1], out) },
  ];

  function wrap(tag, text, out) {
    const node = el(tag);
    inline(text, node);
    out.append(node);
  }

  function plain(text, out) {
    // Single newlines inside a paragraph are kept, as a chat reader expects.
    text.split("\n").forEach((part, k) => {
      if (k > 0) out.append(el("br"));
      if (part) out.append(document.createTextNode(part));
    });
  }

  function inline(text, out) {
    const found = RULES.map(() => null);
    let at = 0;
    while (at < text.length) {
      let best = -1;
      for (let k = 0; k < RULES.length; k++) {
        if (found[k] === undefined) continue; // this rule has no match left
        if (found[k] === null || found[k].index < at) {
          RULES[k].re.lastIndex = at;
          found[k] = RULES[k].re.exec(text) || undefined;
          if (found[k] === undefined) continue;
        }
        if (best < 0 || found[k].index < found[best].index) best = k;
      }
      if (best < 0) break;
      const m = found[best];
      plain(text.slice(at, m.index), out);
      RULES[best].make(m, out);
      at = m.index + m[0].length;
    }
    plain(text.slice(at), out);
  }

  /** The reply as a fragment of safe DOM nodes. */
  window.renderMarkdown = function renderMarkdown(text) {
    const out = document.createDocumentFragment();
    blocks(String(text).replace(/\r\n?/g, "\n").split("\n"), out);
    return out;
  };
})();
