// DOM helpers of the web UI: elements by id, forms' fields, elements built from props, errors shown.
import { ClientError } from "../../../client/index.ts";

export const $ = (id: string): HTMLElement => {
  const node = document.getElementById(id);
  if (!node) throw new Error(`the page has no #${id}`);
  return node;
};
export const form = (id: string) => $(id) as HTMLFormElement;
export const field = <
  T extends HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement = HTMLInputElement,
>(
  f: HTMLFormElement,
  name: string,
) => f.elements.namedItem(name) as T;

export function errorText(error: unknown): string {
  if (error instanceof ClientError) return `${error.code}: ${error.message}`;
  return error instanceof Error ? error.message : String(error);
}

export type Props<K extends keyof HTMLElementTagNameMap> = Partial<
  Omit<HTMLElementTagNameMap[K], "dataset">
> & {
  dataset?: Record<string, string>;
};

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props<K> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  const { dataset, ...rest } = props;
  if (dataset) Object.assign(node.dataset, dataset);
  for (const [k, v] of Object.entries(rest)) if (v !== undefined) Object.assign(node, { [k]: v });
  node.append(...children);
  return node;
}

export function showError(where: string, error?: unknown): void {
  $(where).textContent = error === undefined ? "" : errorText(error);
}
