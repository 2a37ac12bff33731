// The eager layers' autograd nodes in C++: `evonorm::<op>_autograd` is the forward operator `evonorm::<op>` (s_forward,
// b_forward, affine_forward) under the autograd that evonorm_core/ops/library.py registers for it (the same saved
// tensors, the same backward operator call with the same output_mask), recorded as a C++ node, so neither direction
// of an eager layer runs Python between its two operators. On a cache-resident layer the Python autograd function
// and its backward cost about as much as the kernels (docs/benchmarks.md, "The eager layers' autograd nodes in
// C++"). Eager only: program capture calls the operators, whose autograd is the registered one. Double backward
// (create_graph=True) goes through that registered autograd too, which differentiates the composed formula, so the
// formula has one home (library.py).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

namespace evonorm {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptionalTensor = std::optional<Tensor>;

template <typename Signature> c10::TypedOperatorHandle<Signature> find(const char* name) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

using SForward = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const OptionalTensor&, const OptionalTensor&,
                                                    const OptionalTensor&, int64_t, double, bool);
using SBackward = std::tuple<Tensor, Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const OptionalTensor&,
                                                             const OptionalTensor&, const OptionalTensor&,
                                                             const Tensor&, const Tensor&, int64_t, bool,
                                                             std::array<bool, 3>);
using BForward = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>(const Tensor&, const OptionalTensor&,
                                                                    const OptionalTensor&, const OptionalTensor&,
                                                                    const OptionalTensor&, int64_t, double);
using BBackward = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const OptionalTensor&, const OptionalTensor&, const OptionalTensor&, const Tensor&,
    const Tensor&, const Tensor&, const Tensor&, int64_t, double, bool, std::array<bool, 4>);
using AffineForward = Tensor(const Tensor&, const OptionalTensor&, const OptionalTensor&);
using AffineBackward = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const OptionalTensor&,
                                                          const OptionalTensor&, std::array<bool, 2>);

// Looked up at the first call: the operators are defined from Python (library.define()), after this library loads.
const auto& s_forward_op() {
    static const auto handle = find<SForward>("evonorm::s_forward");
    return handle;
}
const auto& s_backward_op() {
    static const auto handle = find<SBackward>("evonorm::s_backward");
    return handle;
}
const auto& b_forward_op() {
    static const auto handle = find<BForward>("evonorm::b_forward");
    return handle;
}
const auto& b_backward_op() {
    static const auto handle = find<BBackward>("evonorm::b_backward");
    return handle;
}
const auto& affine_forward_op() {
    static const auto handle = find<AffineForward>("evonorm::affine_forward");
    return handle;
}
const auto& affine_backward_op() {
    static const auto handle = find<AffineBackward>("evonorm::affine_backward");
    return handle;
}

OptionalTensor given(const Tensor& t) { return t.defined() ? OptionalTensor(t) : std::nullopt; }

// Whether each of the first `count` saved inputs (absent ones saved undefined) wants a gradient. An absent optional
// tensor has no edge, so a present input's edge index is the number of present inputs before it.
template <size_t count> std::array<bool, count> wanted_grads(AutogradContext* ctx, const variable_list& saved) {
    std::array<bool, count> wanted{};
    for (size_t i = 0, edge = 0; i < count; i++) {
        if (saved[i].defined()) wanted[i] = ctx->needs_input_grad(edge++);
    }
    return wanted;
}

// create_graph=True: the gradients of `y`, the forward operator called again on the saved inputs under its
// registered autograd (which then differentiates the composed formula), for each wanted input; `arguments`: the
// number of the forward's arguments, tensors or not.
template <size_t count>
variable_list through_registered_autograd(const Tensor& y, const Tensor& grad, const variable_list& saved,
                                          const std::array<bool, count>& wanted, size_t arguments) {
    variable_list out(arguments), inputs;
    std::vector<size_t> slots;
    for (size_t i = 0; i < count; i++) {
        if (wanted[i]) {
            slots.push_back(i);
            inputs.push_back(saved[i]);
        }
    }
    if (inputs.empty()) return out;
    const variable_list found = torch::autograd::grad({y}, inputs, {grad}, /*retain_graph=*/true,
                                                      /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t k = 0; k < slots.size(); k++) out[slots[k]] = found[k];
    return out;
}

}  // namespace

// The nodes' names (torch::autograd::CppNode<evonorm::SForwardNode>, ...) are what grad_fn.name() shows.
class SForwardNode : public torch::autograd::Function<SForwardNode> {
public:
    static variable_list forward(AutogradContext* ctx, const Tensor& x, const OptionalTensor& weight,
                                 const OptionalTensor& bias, const OptionalTensor& v1, int64_t groups, double eps,
                                 bool centered) {
        auto [y, mean, rstd] = [&] {
            at::AutoDispatchBelowADInplaceOrView below_autograd;
            return s_forward_op().call(x, weight, bias, v1, groups, eps, centered);
        }();
        ctx->save_for_backward({x, weight.value_or(Tensor()), bias.value_or(Tensor()), v1.value_or(Tensor()), mean,
                                rstd});
        ctx->mark_non_differentiable({mean, rstd});  // statistics: no zero gradients made for them
        ctx->set_materialize_grads(false);
        ctx->saved_data["groups"] = groups;
        ctx->saved_data["eps"] = eps;
        ctx->saved_data["centered"] = centered;
        return {y, mean, rstd};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const Tensor& grad = grads[0];
        if (!grad.defined()) return variable_list(7);  // y got no gradient (grads are not materialized)
        const variable_list saved = ctx->get_saved_variables();
        const Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &v1 = saved[3];
        const auto wanted = wanted_grads<4>(ctx, saved);
        const int64_t groups = ctx->saved_data["groups"].toInt();
        const bool centered = ctx->saved_data["centered"].toBool();
        if (at::GradMode::is_enabled()) {
            const double eps = ctx->saved_data["eps"].toDouble();
            const Tensor y = std::get<0>(
                s_forward_op().call(x, given(weight), given(bias), given(v1), groups, eps, centered));
            return through_registered_autograd(y, grad, saved, wanted, 7);
        }
        auto [dx, dweight, dbias, dv1] = s_backward_op().call(grad, x, given(weight), given(bias), given(v1), saved[4],
                                                              saved[5], groups, centered,
                                                              {wanted[1], wanted[2], wanted[3]});
        return {dx, wanted[1] ? dweight : Tensor(), wanted[2] ? dbias : Tensor(), wanted[3] ? dv1 : Tensor(),
                Tensor(), Tensor(), Tensor()};
    }
};

class BForwardNode : public torch::autograd::Function<BForwardNode> {
public:
    static variable_list forward(AutogradContext* ctx, const Tensor& x, const OptionalTensor& weight,
                                 const OptionalTensor& bias, const OptionalTensor& v1, const OptionalTensor& batch_var,
                                 int64_t variant, double eps) {
        auto [y, mean, q, batch_mean, own_var] = [&] {
            at::AutoDispatchBelowADInplaceOrView below_autograd;
            return b_forward_op().call(x, weight, bias, v1, batch_var, variant, eps);
        }();
        // as library.py's _b_setup_context: an NCHW input's backward takes the instance mean from x
        const bool channels_last = !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast);
        const Tensor kept_mean = channels_last ? mean : mean.new_empty({0});
        const bool from_x = !batch_var.has_value();
        // the inputs (a given variance among them: its gradient's edge, and the double backward's input), then what
        // the backward operator reads, the variance it used last (the batch's own or the given one)
        ctx->save_for_backward({x, weight.value_or(Tensor()), bias.value_or(Tensor()), v1.value_or(Tensor()),
                                batch_var.value_or(Tensor()), kept_mean, q, batch_mean, from_x ? own_var : *batch_var});
        ctx->mark_non_differentiable({mean, q, batch_mean, own_var});
        ctx->set_materialize_grads(false);
        ctx->saved_data["variant"] = variant;
        ctx->saved_data["eps"] = eps;
        return {y, mean, q, batch_mean, own_var};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const Tensor& grad = grads[0];
        if (!grad.defined()) return variable_list(7);
        const variable_list saved = ctx->get_saved_variables();
        const Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &v1 = saved[3], &given_var = saved[4];
        auto wanted = wanted_grads<5>(ctx, saved);
        const int64_t variant = ctx->saved_data["variant"].toInt();
        const double eps = ctx->saved_data["eps"].toDouble();
        if (at::GradMode::is_enabled()) {
            const Tensor y = std::get<0>(
                b_forward_op().call(x, given(weight), given(bias), given(v1), given(given_var), variant, eps));
            return through_registered_autograd(y, grad, saved, wanted, 7);
        }
        wanted[3] = wanted[3] && variant == 0;  // v1 is B0's alone
        const bool from_x = !given_var.defined();
        auto [dx, dweight, dbias, dv1, dvar] =
            b_backward_op().call(grad, x, given(weight), given(bias), given(v1), saved[5], saved[6], saved[7], saved[8],
                                 variant, eps, from_x, {wanted[1], wanted[2], wanted[3], wanted[4]});
        return {dx, wanted[1] ? dweight : Tensor(), wanted[2] ? dbias : Tensor(), wanted[3] ? dv1 : Tensor(),
                wanted[4] ? dvar : Tensor(), Tensor(), Tensor()};
    }
};

class AffineForwardNode : public torch::autograd::Function<AffineForwardNode> {
public:
    static variable_list forward(AutogradContext* ctx, const Tensor& x, const OptionalTensor& weight,
                                 const OptionalTensor& bias) {
        Tensor y = [&] {
            at::AutoDispatchBelowADInplaceOrView below_autograd;
            return affine_forward_op().call(x, weight, bias);
        }();
        ctx->save_for_backward({x, weight.value_or(Tensor()), bias.value_or(Tensor())});
        ctx->set_materialize_grads(false);
        return {y};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const Tensor& grad = grads[0];
        if (!grad.defined()) return variable_list(3);
        const variable_list saved = ctx->get_saved_variables();
        const Tensor &x = saved[0], &weight = saved[1], &bias = saved[2];
        const auto wanted = wanted_grads<3>(ctx, saved);
        if (at::GradMode::is_enabled()) {
            const Tensor y = affine_forward_op().call(x, given(weight), given(bias));
            return through_registered_autograd(y, grad, saved, wanted, 3);
        }
        auto [dx, dweight, dbias] =
            affine_backward_op().call(grad, x, given(weight), given(bias), {wanted[1], wanted[2]});
        return {dx, wanted[1] ? dweight : Tensor(), wanted[2] ? dbias : Tensor()};
    }
};

namespace {

std::tuple<Tensor, Tensor, Tensor> s_forward_autograd(const Tensor& x, const OptionalTensor& weight,
                                                      const OptionalTensor& bias, const OptionalTensor& v1,
                                                      int64_t groups, double eps, bool centered) {
    const variable_list out = SForwardNode::apply(x, weight, bias, v1, groups, eps, centered);
    return {out[0], out[1], out[2]};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> b_forward_autograd(const Tensor& x, const OptionalTensor& weight,
                                                                      const OptionalTensor& bias,
                                                                      const OptionalTensor& v1,
                                                                      const OptionalTensor& batch_var, int64_t variant,
                                                                      double eps) {
    const variable_list out = BForwardNode::apply(x, weight, bias, v1, batch_var, variant, eps);
    return {out[0], out[1], out[2], out[3], out[4]};
}

Tensor affine_forward_autograd(const Tensor& x, const OptionalTensor& weight, const OptionalTensor& bias) {
    return AffineForwardNode::apply(x, weight, bias)[0];
}

}  // namespace

// The schemas are the forward operators' (library.SCHEMAS) under the name <op>_autograd.
TORCH_LIBRARY_FRAGMENT(evonorm, m) {
    m.def("s_forward_autograd(Tensor x, Tensor? weight, Tensor? bias, Tensor? v1, int groups, float eps, "
          "bool centered) -> (Tensor, Tensor, Tensor)");
    m.def("b_forward_autograd(Tensor x, Tensor? weight, Tensor? bias, Tensor? v1, Tensor? batch_var, int variant, "
          "float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
    m.def("affine_forward_autograd(Tensor x, Tensor? weight, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(evonorm, CompositeImplicitAutograd, m) {
    m.impl("s_forward_autograd", &s_forward_autograd);
    m.impl("b_forward_autograd", &b_forward_autograd);
    m.impl("affine_forward_autograd", &affine_forward_autograd);
}

}  // namespace evonorm
