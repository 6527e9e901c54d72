// Renders ./openapi.json as a list of routes: method, path, summary, then
// parameters, request body and responses. Text only (textContent, never
// innerHTML), no dependencies, nothing fetched but the document itself.
"use strict";

const METHODS = ["get", "post", "put", "patch", "delete"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
  }
  return node;
}

// A $ref ("#/components/schemas/X") resolved against the document.
function resolve(doc, value) {
  if (value && typeof value.$ref === "string" && value.$ref.startsWith("#/")) {
    return value.$ref.slice(2).split("/").reduce((node, key) => (node ? node[key] : undefined), doc);
  }
  return value;
}

function schemaBlock(doc, schema) {
  return el("pre", {}, JSON.stringify(expand(doc, schema, 0), null, 2));
}

// Inlines $refs a few levels deep, so a body's shape shows where it is used.
function expand(doc, value, depth) {
  if (Array.isArray(value)) return value.map((item) => expand(doc, item, depth));
  if (!value || typeof value !== "object") return value;
  if (value.$ref && depth < 3) return expand(doc, resolve(doc, value), depth + 1);
  const out = {};
  for (const [key, item] of Object.entries(value)) out[key] = expand(doc, item, depth);
  return out;
}

function operation(doc, path, method, op) {
  const body = el("div", { class: "body" });
  if (op.description) body.append(el("p", {}, op.description));
  const params = op.parameters || [];
  if (params.length) {
    const rows = params.map((p) => el("tr", {},
      el("td", {}, el("code", {}, p.name)), el("td", {}, p.in + (p.required ? ", required" : "")),
      el("td", {}, p.description || "")));
    body.append(el("h3", {}, "Parameters"), el("table", {}, ...rows));
  }
  if (op.requestBody) {
    const content = op.requestBody.content || {};
    body.append(el("h3", {}, "Request body" + (op.requestBody.required ? "" : " (optional)")));
    for (const [type, media] of Object.entries(content)) {
      body.append(el("p", {}, el("code", {}, type)), schemaBlock(doc, media.schema || {}));
    }
  }
  const rows = Object.entries(op.responses || {}).map(([status, response]) => {
    const answer = resolve(doc, response);
    const types = Object.keys(answer.content || {}).join(", ");
    return el("tr", {}, el("td", {}, el("code", {}, status)), el("td", {}, answer.description || ""),
      el("td", {}, types));
  });
  body.append(el("h3", {}, "Responses"), el("table", {}, ...rows));
  const line = el("summary", {}, el("span", { class: "method " + method }, method),
    el("span", { class: "path" }, path), el("span", { class: "summary" }, op.summary || ""));
  const item = el("details", {}, line, body);
  item.dataset.search = [method, path, op.summary || "", (op.tags || []).join(" ")].join(" ").toLowerCase();
  return item;
}

function render(doc) {
  document.getElementById("title").textContent = `${doc.info.title} ${doc.info.version}`;
  document.getElementById("description").textContent = doc.info.description || "";
  const main = document.getElementById("routes");
  main.replaceChildren();
  const sections = new Map((doc.tags || []).map((tag) => [tag.name, []]));
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const method of METHODS) {
      if (!item[method]) continue;
      const tag = (item[method].tags || ["other"])[0];
      if (!sections.has(tag)) sections.set(tag, []);
      sections.get(tag).push(operation(doc, path, method, item[method]));
    }
  }
  const described = new Map((doc.tags || []).map((tag) => [tag.name, tag.description]));
  for (const [tag, items] of sections) {
    if (!items.length) continue;
    const section = el("section", { "data-tag": tag }, el("h2", {}, described.get(tag) || tag), ...items);
    main.append(section);
  }
}

function filter(words) {
  const wanted = words.toLowerCase().split(/\s+/).filter(Boolean);
  for (const item of document.querySelectorAll("details")) {
    item.hidden = !wanted.every((word) => item.dataset.search.includes(word));
  }
  for (const section of document.querySelectorAll("section")) {
    section.hidden = !section.querySelector("details:not([hidden])");
  }
}

async function main() {
  const status = document.getElementById("status");
  try {
    const response = await fetch("openapi.json");
    if (!response.ok) throw new Error(`openapi.json: HTTP ${response.status}`);
    render(await response.json());
  } catch (error) {
    status.textContent = String(error);
    status.className = "error";
    return;
  }
  document.getElementById("filter").addEventListener("input", (event) => filter(event.target.value));
}

main();
